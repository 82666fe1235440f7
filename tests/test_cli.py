"""The `hexfuse` command as a user meets it: description, --debug anywhere, help with defaults."""

from __future__ import annotations

import re

import pytest

from hexfuse.cli import build_parser, main
from hexfuse.graph_passes.errors import HexfuseError


def test_help_describes_the_tool(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "Hexagon" in out and "hexfuse fuse MODEL.onnx -o OUT.onnx" in out and "exit codes" in out
    assert "The ``hexfuse`` command" not in out


@pytest.mark.parametrize("argv", [["--debug", "ab", "missing.onnx", "also.onnx"],
                                  ["ab", "--debug", "missing.onnx", "also.onnx"],
                                  ["ab", "missing.onnx", "also.onnx", "--debug"],
                                  ["analyze", "missing.onnx", "--debug"]])
def test_debug_anywhere_shows_the_traceback(argv):
    with pytest.raises(HexfuseError):
        main(argv)


def test_without_debug_one_line(capsys):
    assert main(["ab", "missing.onnx", "also.onnx"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hexfuse: error: model file not found: missing.onnx"]


def test_every_ab_option_has_help_and_states_its_default():
    ab = build_parser()._subparsers._group_actions[0].choices["ab"]
    for action in ab._actions:
        if action.dest in ("help",):
            continue
        assert action.help, f"ab {action.option_strings or action.dest} has no help"
        if action.option_strings and action.default not in (None, False, True):
            assert re.search(r"default", action.help), f"ab {action.option_strings[0]} does not state its default"
