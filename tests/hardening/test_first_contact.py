"""The last hostile inputs of issue 21: a spec that lies about its tasks, two runs writing one output set
at once, models over 2 GiB through external data, inputs that are not regular files, SIGTERM right
after a temporary file is created, and a package build that cannot run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse.graph_passes.load import io as io_module
from hexfuse.graph_passes.load.io import write_files
from tests import builders
from tests.hardening._support import one_error, run, temporaries

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def fused(tmp_path, capsys) -> Path:
    source = builders.save(builders.two_branch(96), tmp_path / "in.onnx")
    out = tmp_path / "fused" / "f.onnx"
    code, err = run(capsys, "fuse", source, "-o", out, "--allow-scalar", "--as-designed")
    assert code == 0 and "1 fused node " in err, err
    return out


def test_oppkg_refuses_a_spec_whose_task_lists_an_output_no_node_makes(fused, tmp_path, capsys):
    spec_file = fused.with_suffix(".hexfuse.json")
    spec = json.loads(spec_file.read_text())
    spec["fused_ops"][0]["tasks"][0]["outputs"].append("never_made")  # the model (and its hash) unchanged
    spec_file.write_text(json.dumps(spec))
    code, err = run(capsys, "oppkg", fused, "-o", tmp_path / "pkg")
    assert code == 1 and "lists output 'never_made', which none of its nodes makes" in one_error(err)
    assert not (tmp_path / "pkg").exists()


def test_oppkg_refuses_a_spec_whose_nodes_are_not_the_models(fused, tmp_path, capsys):
    spec_file = fused.with_suffix(".hexfuse.json")
    spec = json.loads(spec_file.read_text())
    node = spec["fused_ops"][0]["tasks"][-1]["nodes"][0]
    node["inputs"] = list(reversed(node["inputs"])) if len(node["inputs"]) > 1 else [spec["fused_ops"][0]["inputs"][-1]["name"]]
    spec_file.write_text(json.dumps(spec))
    code, err = run(capsys, "oppkg", fused, "-o", tmp_path / "pkg")
    assert code == 1 and "its nodes are not the function's" in one_error(err)


def test_oppkg_checks_the_htp_build_environment_before_writing(fused, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    code, err = run(capsys, "oppkg", fused, "-o", tmp_path / "pkg", "--build", "htp_x86")
    assert code == 1 and "needs QNN_SDK_ROOT" in one_error(err)
    assert not (tmp_path / "pkg").exists()
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path / "no-sdk-here"))
    code, err = run(capsys, "oppkg", fused, "-o", tmp_path / "pkg", "--build", "htp_x86")
    assert code == 1 and "is not a directory" in one_error(err) and not (tmp_path / "pkg").exists()
    (tmp_path / "no-sdk-here").mkdir()  # a folder, but no SDK: refused before make runs (and leaves objects)
    code, err = run(capsys, "oppkg", fused, "-o", tmp_path / "pkg", "--build", "htp_x86")
    assert code == 1 and "holds no include/QNN" in one_error(err) and not (tmp_path / "pkg").exists()


# --- two runs onto one output set -------------------------------------------------------------------

_WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from hexfuse.graph_passes.load import io
    tag, folder = sys.argv[1], Path(sys.argv[2])
    real = os.replace
    def slow(src, dst):  # widen the window between the renames of one set
        real(src, dst)
        time.sleep(0.15)
    io.os.replace = slow
    while not (folder / "go").exists():
        time.sleep(0.005)
    io.write_files([(folder / name, tag.encode()) for name in ("m.onnx", "m.hexfuse.json", "m.hexfuse.md")])
""")


def test_two_writers_of_one_output_set_never_leave_a_mix(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(3):
        (out / "go").unlink(missing_ok=True)
        procs = [subprocess.Popen([sys.executable, str(script), tag, str(out)], env=env) for tag in ("A", "B")]
        (out / "go").write_text("")
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
        contents = {(out / name).read_text() for name in ("m.onnx", "m.hexfuse.json", "m.hexfuse.md")}
        assert len(contents) == 1, contents  # all of A or all of B
        assert not temporaries(out)


def test_two_fuse_runs_onto_one_output_leave_a_model_beside_its_own_spec(tmp_path):
    """Two different models fused at once onto one -o: the spec's hash names the model beside it."""
    a = builders.save(builders.two_branch(96), tmp_path / "a.onnx")
    b = builders.save(builders.two_branch(128), tmp_path / "b.onnx")
    out = tmp_path / "out" / "f.onnx"
    procs = [subprocess.Popen([sys.executable, "-m", "hexfuse", "fuse", src, "-o", str(out), "--allow-scalar", "--as-designed"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT) for src in (a, b)]
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0], [p.stderr.read().decode() for p in procs]
    spec = json.loads(out.with_suffix(".hexfuse.json").read_text())
    import hashlib
    assert spec["model_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    source = json.loads(out.with_suffix(".hexfuse.json").read_text())["source_sha256"]
    report = out.with_suffix(".hexfuse.md").read_text()
    assert source[:16] in report  # the report of the same run as the spec


# --- inputs that must be refused from what the file system says ------------------------------------

def _external_model(tmp_path: Path, length: int) -> Path:
    """A model whose one initializer lives in a sparse external file of ``length`` bytes (no disk use)."""
    data = tmp_path / "weights.bin"
    with open(data, "wb") as f:
        f.truncate(length)
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)
    del tensor.dims[:]
    tensor.dims.append(length // 4)
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    graph = helper.make_graph([node], "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [length // 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [length // 4])], [tensor])
    path = tmp_path / "big.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


@pytest.mark.parametrize("command", ["analyze", "fuse"])
def test_a_model_over_2_gib_through_external_data_is_refused_from_file_sizes(tmp_path, capsys, command):
    path = _external_model(tmp_path, 2**31 + 4096)
    before = sorted(os.listdir(tmp_path))  # (not the bytes: reading the sparse 2 GiB file takes 10 s)
    argv = [command, path] + (["-o", tmp_path / "out.onnx"] if command == "fuse" else [])
    code, err = run(capsys, *argv)
    line = one_error(err)
    assert code == 1 and "over protobuf's 2 GiB limit" in line and "2.00 GiB" in line
    assert sorted(os.listdir(tmp_path)) == before and (tmp_path / "weights.bin").stat().st_size == 2**31 + 4096


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "fifo"])
def test_what_is_not_a_regular_file_is_refused(tmp_path, capsys, device):
    if device == "fifo":
        device = str(tmp_path / "pipe.onnx")
        os.mkfifo(device)
    elif not os.path.exists(device):
        pytest.skip(f"no {device}")
    code, err = run(capsys, "analyze", device)
    assert code == 1 and "not a regular file" in one_error(err)


# --- SIGTERM right after mkstemp ------------------------------------------------------------------

class _Stopped(Exception):
    pass


def test_sigterm_right_after_the_temporary_is_created_leaves_no_temporary(tmp_path, monkeypatch):
    """The signal lands in the window that used to sit between mkstemp and the try (about 1 run in 10
    under load): it is held until the temporary is recorded, then raised, and the temporary removed."""
    real = tempfile.mkstemp

    def mkstemp_then_sigterm(*args, **kwargs):
        created = real(*args, **kwargs)
        signal.raise_signal(signal.SIGTERM)
        return created

    def stop(signum, frame):
        raise _Stopped(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    monkeypatch.setattr(io_module.tempfile, "mkstemp", mkstemp_then_sigterm)
    try:
        with pytest.raises(_Stopped):
            write_files([(tmp_path / "m.onnx", b"model"), (tmp_path / "m.hexfuse.json", b"spec")])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sorted(os.listdir(tmp_path)) == []
