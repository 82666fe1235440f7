"""The hexfuse command on good and bad input: one-line errors, exit codes, untouched inputs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import onnx
import pytest

from hexfuse.cli import main
from tests import builders


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("hexfuse: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    model.opset_import[0].version = version
    return model


BAD_INPUTS = {
    "missing": (lambda d: d / "absent.onnx", "no such file"),
    "directory": (lambda d: d, "is a directory"),
    "not_onnx": (lambda d: _write(d / "x.onnx", b"this is plain text, not a protobuf\n" * 20), "not an ONNX model"),
    "empty": (lambda d: _write(d / "x.onnx", b""), "not an ONNX model"),
    "truncated": (lambda d: _write(d / "x.onnx", builders.two_branch().SerializeToString()[:300]), "not an ONNX model"),
    "cycle": (lambda d: builders.save(builders.with_cycle(), d / "x.onnx"), "cycle"),
    "invalid_graph": (lambda d: builders.save(_undefined_input(), d / "x.onnx"), "which no node, input or initializer defines"),
    "unknown_op": (lambda d: builders.save(_unknown_op(), d / "x.onnx"), "invalid ONNX graph"),
    "opset_too_new": (lambda d: builders.save(_opset(builders.two_branch(), 99), d / "x.onnx"), "newer than the newest supported"),
}


def _write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _undefined_input() -> onnx.ModelProto:
    model = builders.two_branch()
    model.graph.node[2].input[0] = "nobody_makes_this"
    return model


def _unknown_op() -> onnx.ModelProto:
    model = builders.two_branch()
    model.graph.node[1].op_type = "NoSuchOp"
    return model


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
@pytest.mark.parametrize("command", ["analyze", "fuse"])
def test_bad_input_gives_one_line_error_and_exit_1(tmp_path, capsys, case, command):
    make, expected = BAD_INPUTS[case]
    path = str(make(tmp_path))
    before = sorted(os.listdir(tmp_path))
    argv = [command, path] + (["-o", str(tmp_path / "out.onnx")] if command == "fuse" else [])
    code, _, err = _run(capsys, *argv)
    assert code == 1
    assert expected in _one_line_error(err)
    assert sorted(os.listdir(tmp_path)) == before  # nothing written, not even a temporary file


def test_fuse_writes_model_spec_and_report_and_leaves_input_alone(tmp_path, capsys):
    source = builders.save(builders.two_branch(96), tmp_path / "in.onnx")
    digest = hashlib.sha256(open(source, "rb").read()).hexdigest()
    code, _, err = _run(capsys, "fuse", source, "-o", str(tmp_path / "out.onnx"), "--allow-scalar", "--as-designed")
    assert code == 0, err
    assert "1 fused node " in err
    assert hashlib.sha256(open(source, "rb").read()).hexdigest() == digest
    assert sorted(os.listdir(tmp_path)) == ["in.onnx", "out.hexfuse.json", "out.hexfuse.md", "out.onnx", "out.timeline.json"]
    onnx.checker.check_model(onnx.load(tmp_path / "out.onnx"), full_check=True)


def test_plot_draws_the_png_only_when_asked(tmp_path, capsys):
    source = builders.save(builders.two_branch(96), tmp_path / "in.onnx")
    assert _run(capsys, "fuse", source, "-o", str(tmp_path / "out.onnx"), "--plot", "--allow-scalar", "--as-designed")[0] == 0
    assert (tmp_path / "out.timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_input_gives_byte_identical_outputs(tmp_path, capsys):
    source = builders.save(builders.two_branch(96), tmp_path / "in.onnx")
    outputs = []
    for name in ("a", "b"):
        assert _run(capsys, "fuse", source, "-o", str(tmp_path / f"{name}.onnx"))[0] == 0
        outputs.append([(tmp_path / f"{name}{ext}").read_bytes() for ext in (".onnx", ".hexfuse.md")])
    assert outputs[0] == outputs[1]
    spec_a, spec_b = ((tmp_path / f"{n}.hexfuse.json").read_text() for n in "ab")
    assert spec_a.replace('"a.onnx"', '"b.onnx"') == spec_b


def test_nothing_to_fuse_is_exit_0_with_message(tmp_path, capsys):
    source = builders.save(builders.chain(), tmp_path / "in.onnx")
    code, _, err = _run(capsys, "fuse", source, "-o", str(tmp_path / "out.onnx"))
    assert code == 0 and "nothing to fuse" in err
    assert (tmp_path / "out.onnx").read_bytes() == (tmp_path / "in.onnx").read_bytes()


def test_fusing_a_fused_model_changes_nothing(tmp_path, capsys):
    source = builders.save(builders.two_branch(96), tmp_path / "in.onnx")
    assert _run(capsys, "fuse", source, "-o", str(tmp_path / "once.onnx"), "--allow-scalar", "--as-designed")[0] == 0
    code, _, err = _run(capsys, "fuse", str(tmp_path / "once.onnx"), "-o", str(tmp_path / "twice.onnx"))
    assert code == 0 and "already fused" in err
    assert (tmp_path / "once.onnx").read_bytes() == (tmp_path / "twice.onnx").read_bytes()


def test_refuses_to_overwrite_its_input(tmp_path, capsys):
    source = builders.save(builders.two_branch(96), tmp_path / "in.onnx")
    before = (tmp_path / "in.onnx").read_bytes()
    code, _, err = _run(capsys, "fuse", source, "-o", source)
    assert code == 1 and "overwrite the input" in _one_line_error(err)
    assert (tmp_path / "in.onnx").read_bytes() == before


def test_analyze_explains_a_negative_model(capsys):
    code, out, _ = _run(capsys, "analyze", builders.light_model("vgg19"))
    assert code == 0
    # a chain of Conv + its folded Relu units and pools: nothing independent; on HTP the Conv + Relu
    # task also waits for a QNN translation of the Relu (op_package/qnn_ops.py)
    assert "fused groups: 0" in out and ("a path links them" in out or "has no QNN translation" in out)


def test_usage_error_is_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fuse"])
    assert exit_info.value.code == 2


def test_console_script_runs(tmp_path):
    source = builders.save(builders.two_branch(96), tmp_path / "in.onnx")
    done = subprocess.run([sys.executable, "-m", "hexfuse", "analyze", source, "--allow-scalar", "--as-designed"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "fused groups: 1" in done.stdout


def test_htp_targets_refuse_scalar_vector_kernels_unless_asked(capsys, tmp_path):
    """two_branch's Softmax has no HVX kernel: by default nothing fuses and the report says why."""
    source = builders.save(builders.two_branch(96), tmp_path / "in.onnx")
    code, out, _ = _run(capsys, "analyze", source, "--as-designed")
    assert code == 0 and "fused groups: 0" in out
    assert "needs an HVX path: Softmax" in out and "--allow-scalar" in out
    code, out, _ = _run(capsys, "analyze", source, "--allow-scalar", "--as-designed")
    assert code == 0 and "fused groups: 1" in out
