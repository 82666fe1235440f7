"""The `hexfuse` command as a user meets it: description, --debug anywhere, help with defaults."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from hexfuse.cli import COMMANDS, DESCRIPTION, build_parser, main
from hexfuse.graph_passes.errors import HexfuseError

ROOT = Path(__file__).resolve().parents[1]


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


def _subcommands(parser) -> dict[str, str]:
    """Subcommand -> its one-line help, as `hexfuse --help` lists it."""
    action = parser._subparsers._group_actions[0]
    return {choice.dest: choice.help for choice in action._choices_actions}


def test_help_lists_every_subcommand_with_the_help_its_module_gives():
    light, full = _subcommands(build_parser(None)), _subcommands(build_parser())
    assert set(light) == set(COMMANDS) == set(full) >= {"merge", "compile", "optrace", "analyze", "bundle"}
    assert light == full  # the list printed without importing a module says what the module says
    for name in COMMANDS:
        assert f"hexfuse {name} " in DESCRIPTION, name  # and the examples at the top name each one


def test_help_imports_neither_onnx_nor_numpy():
    """`hexfuse --help` (and a usage error) parse before anything heavy loads: 0.2-0.3 s instead of 3 s here."""
    code = ("import sys\nfrom hexfuse.cli import main\n"
            "for argv in (['--help'], ['nosuch']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('onnx', 'numpy', 'onnxruntime') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_help_of_subcommands_imports_neither_onnx_nor_numpy():
    """`hexfuse COMMAND --help` and usage errors load only what the parsers need (p14)."""
    from hexfuse.cli import build_parser

    (commands,) = [action.choices for action in build_parser()._actions if action.dest == "command"]
    argvs = [[command, "--help"] for command in commands] + [["oppkg"], ["calibrate"], ["engines"], ["fuse", "m.onnx"]]
    code = ("import sys\nfrom hexfuse.cli import main\n"
            f"for argv in {argvs!r}:\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('onnx', 'numpy', 'onnxruntime') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_ctrl_c_during_the_first_imports_is_one_line(monkeypatch, capsys):
    """A SIGINT while onnx/numpy load (before the handlers) ends like one later: 130 and one line (p13)."""
    import hexfuse.cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(hexfuse.cli, "_import_before_handlers", interrupted)
    assert main(["analyze", "missing.onnx"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == ["hexfuse: error: stopped by SIGINT: outputs are all written or untouched, "
                                        "temporary files removed"]


@pytest.mark.parametrize("command", ["analyze", "fuse"])
def test_pass_commands_have_a_description_and_state_defaults(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Find independent work" in out if command == "analyze" else "never modified" in out
    assert "(default sm8550)" in out and "(default 0.1)" in out and "default auto" in out


def test_engines_none_means_the_op_type_rules_even_beside_a_map(capsys):
    googlenet = str(ROOT / "models" / "googlenet.onnx")  # models/engines/googlenet.sm8650.json is beside it
    assert main(["analyze", googlenet, "--target", "sm8650", "--json"]) == 0
    with_map = json.loads(capsys.readouterr().out)["engine_map"]
    assert main(["analyze", googlenet, "--target", "sm8650", "--engines", "none", "--json"]) == 0
    without = json.loads(capsys.readouterr().out)["engine_map"]
    assert "googlenet.sm8650.json" in with_map["note"] and with_map["decided_by"].get("optrace map")
    assert "--engines none" in without["note"] and set(without["decided_by"]) == {"op-type rules"}


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn not installed")
def test_compile_creates_its_output_folder_like_fuse(tmp_path):
    """In a child process: a QNN EP session in this one changes later QNN profiles (tests/tools/test_ab_qnn.py)."""
    out = tmp_path / "new" / "deeper" / "ctx.onnx"
    done = subprocess.run([sys.executable, "-m", "hexfuse", "compile", str(ROOT / "models" / "mlp_chain.onnx"), "-o",
                           str(out), "--target", "sm8650"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.is_file()


def test_compile_that_fails_leaves_no_folder_behind(tmp_path, monkeypatch):
    from hexfuse.tools.device import context

    def failing(*args, **kwargs):
        raise HexfuseError("the QNN EP refused the model")

    monkeypatch.setattr(context, "_compile_context", failing)
    with pytest.raises(HexfuseError):
        context.compile_context(ROOT / "models" / "mlp_chain.onnx", tmp_path / "new" / "deeper" / "ctx.onnx", {}, {})
    assert sorted(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("")
    with pytest.raises(HexfuseError, match="is not a directory"):
        context.compile_context(ROOT / "models" / "mlp_chain.onnx", tmp_path / "file" / "ctx.onnx", {}, {})
