"""The JetStream sync interval: 'always' or a positive Go duration, refused by name before anything starts."""

from __future__ import annotations

import pytest

from mirror.events.errors import InvalidSyncInterval
from mirror.events.nats.server import SYNC_ALWAYS, config_text, validate_sync_interval
from mirror.stack.embedded import StackSettings


@pytest.mark.parametrize(("given", "taken"), [
    ("always", "always"), ("ALWAYS", "always"), (" Always ", "always"),
    ("2m", "2m"), ("10s", "10s"), ("1m30s", "1m30s"), ("500ms", "500ms"), ("1.5h", "1.5h"), (".5s", ".5s"),
    ("250us", "250us"), ("250µs", "250µs"), ("1h2m3s4ms", "1h2m3s4ms"),
])
def test_always_and_go_durations_are_taken(given: str, taken: str) -> None:
    assert validate_sync_interval(given) == taken


@pytest.mark.parametrize(("given", "reason"), [
    ("", "neither 'always' nor a duration"),
    ("10", "neither 'always' nor a duration"),  # nats-server would read a bare number as seconds
    ("10S", "neither 'always' nor a duration"),  # Go's units are lower case
    ("2 m", "neither 'always' nor a duration"),
    ("-2m", "neither 'always' nor a duration"),
    ("2m always", "neither 'always' nor a duration"),
    ("never", "neither 'always' nor a duration"),
    ("0s", "longer than zero"),
    ("0m0s", "longer than zero"),
    ("300000000h", "longest duration Go can hold"),
])
def test_anything_else_is_refused_naming_the_value(given: str, reason: str) -> None:
    with pytest.raises(InvalidSyncInterval) as refused:
        validate_sync_interval(given)
    assert refused.value.value == given
    assert repr(given) in str(refused.value) and reason in str(refused.value)
    assert isinstance(refused.value, ValueError)


def test_the_config_file_holds_the_setting_alone() -> None:
    """The store, ports and log stay flags: nats-server refuses a store_dir given both ways."""
    assert 'jetstream {\n  sync_interval: "always"\n}\n' in config_text(SYNC_ALWAYS)
    assert 'sync_interval: "2m"' in config_text("2m")
    assert "store_dir" not in config_text("2m")
    with pytest.raises(InvalidSyncInterval):
        config_text("2")


def test_the_stack_syncs_always_by_default_and_refuses_a_bad_value_when_configured() -> None:
    assert StackSettings().nats_sync == "always"
    assert StackSettings(nats_sync="2m").nats_sync == "2m"
    with pytest.raises(InvalidSyncInterval, match="'soon'"):
        StackSettings(nats_sync="soon")
