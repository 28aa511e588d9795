"""`mirror sim-llm`'s settings, in process: latency models, fault rates and scripts are checked when
the settings are made. The simulator over real HTTP is in ``tests/system/test_sim_llm.py``."""

from __future__ import annotations

import math

import pytest

from mirror.sim.errors import InvalidSimSetting
from mirror.sim.settings import SimSettings, parse_fault_rate, parse_latency


def test_settings_reject_bad_values_with_a_clear_message() -> None:
    for bad in ("nonsense", "fixed", "fixed:-1", "uniform:5", "uniform:9,1", "lognormal:0,1", "fixed:nan", "gauss:1"):
        with pytest.raises(ValueError, match="invalid latency"):
            SimSettings(latency=bad)
    assert parse_latency("uniform:10,20").kind == "uniform"
    assert parse_fault_rate("timeout=0.25") == ("timeout", 0.25)
    for bad in ("500", "501=0.1", "500=2", "500=x"):
        with pytest.raises(InvalidSimSetting):
            parse_fault_rate(bad)
    with pytest.raises(InvalidSimSetting, match="at most 1"):
        SimSettings(fault_rates=(("429", 0.6), ("500", 0.6)))
    with pytest.raises(InvalidSimSetting, match="script entry"):
        SimSettings(script=("ok", "boom"))
    assert SimSettings(script=("garbage", "no_choices", "no_usage", "echo_error")).script[-1] == "echo_error"
    assert parse_fault_rate("echo_error=0.5") == ("echo_error", 0.5)
    for bad_seconds in (-1.0, math.nan, math.inf):
        with pytest.raises(InvalidSimSetting, match="retry_after_s"):
            SimSettings(retry_after_s=bad_seconds)
