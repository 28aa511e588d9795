"""The `mirror` command's errors are one line on stderr: usage errors and the gateway's answers."""

from __future__ import annotations

import pytest

from mirror.cli.app import command_path
from mirror.cli.errors import GatewayRequestFailed
from tests.support.cli import run_main


@pytest.mark.parametrize(("args", "line"), [  # line None: see the option's message below
    (("status", "--nope"),
     "mirror: error: No such option: --nope (Possible options: --token); see `mirror status --help`"),
    (("replay", "state"), "mirror: error: Missing argument 'conversation'; see `mirror replay state --help`"),
    (("recompute", "--mode"), "mirror: error: Option '--mode' requires an argument; see `mirror recompute --help`"),
    (("replay", "state", "c1", "--at", "-1"), "mirror replay state"),
    (("up", "--port", "eighty"), "mirror up"),
    (("nosuch",), "mirror: error: No such command 'nosuch'; see `mirror --help`"),
])
def test_a_usage_error_is_one_line_naming_the_option_and_the_help(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], line: str) -> None:
    ran = run_main(monkeypatch, capsys, *args)
    assert ran.code == 2 and ran.out == ""
    (printed,) = ran.err.splitlines()
    assert "╭" not in printed and "Usage:" not in printed
    if line.startswith("mirror: error: "):
        assert printed == line
    else:  # a refused value: the option and the command's help, whatever click's wording of the problem
        assert printed.startswith(f"mirror: error: Invalid value for '{args[-2]}': "), printed
        assert printed.endswith(f"; see `{line} --help`"), printed


def test_help_exits_0_and_mirror_alone_prints_the_help(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_main(monkeypatch, capsys, "log", "--help")
    assert ran.code == 0 and "stats" in ran.out
    ran = run_main(monkeypatch, capsys)
    assert ran.code == 2 and "recompute" in ran.out and ran.err == ""  # no_args_is_help: the help, exit status 2 as click's


def test_the_command_path_follows_subcommand_names() -> None:
    assert command_path(["replay", "state", "--at"]) == "mirror replay state"
    assert command_path(["--config", "x.toml", "bench", "turns", "--json"]) == "mirror bench turns"
    assert command_path(["--mode"]) == "mirror"


@pytest.mark.parametrize(("status", "detail", "fix"), [
    (400, "message is empty", None),
    (404, "default/c1/main has no seq 99: it ends at seq 4 (ask for 0..4)", None),
    (404, "no recompute job 'abc' for this tenant: none was started", None),
    (409, "conversation moved on elsewhere; retry: fenced", None),
    (503, "the model at http://127.0.0.1:1/v1 does not answer", None),
    (404, "no conversation 'c9' for this tenant", "check the conversation id (`mirror status` lists them)"),
    (401, "invalid token", "check --token / MIRROR_TOKEN (a revoked or mistyped token?)"),
    (500, "Internal Server Error", "see the gateway's log"),
])
def test_a_gateway_error_shows_its_detail_and_a_fix_only_where_the_gateway_cannot_give_one(
        status: int, detail: str, fix: str | None) -> None:
    message = str(GatewayRequestFailed("GET", "/v1/conversations/c1/state", status, detail))
    expected = f"GET /v1/conversations/c1/state failed with HTTP {status}: {detail}"
    assert message == (expected if fix is None else f"{expected}; {fix}")
