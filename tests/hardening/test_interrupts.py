"""Class 4, interrupts: SIGTERM during the write left a `.tmp` file; between model and spec it left a
new model beside an old spec, and `oppkg` built a kernel for the old shapes (exit 0); re-fusing a
fused model wrote an empty spec. Now SIGTERM unwinds like Ctrl-C (temporaries removed), an output set
is renamed into place with both signals held (all new or all old), the spec carries the model's hash
that `oppkg` checks, and re-fusing carries the spec forward."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hexfuse.graph_passes.load import io as io_module
from hexfuse.graph_passes.spec.model import FusionSpec
from tests import builders
from tests.hardening._support import one_error, run, snapshot, spec_matches_model, temporaries


def _fuse(capsys, source, out) -> None:
    code, err = run(capsys, "fuse", source, "-o", out, "--min-gain", "0", "--as-designed", "--allow-scalar")
    assert code == 0, err


@pytest.fixture
def runs(tmp_path, capsys):
    """An old output set (model A) in ``out/``, and what an uninterrupted run of model B writes there."""
    a = builders.save(builders.two_branch(32), tmp_path / "a.onnx")
    b = builders.save(builders.twin_blocks(), tmp_path / "b.onnx")
    _fuse(capsys, a, tmp_path / "out" / "f.onnx")
    _fuse(capsys, b, tmp_path / "new" / "f.onnx")
    return tmp_path, b, snapshot(tmp_path / "out"), snapshot(tmp_path / "new")


def _kill_on(monkeypatch, target, name: str, call: int, signum: int) -> None:
    """Make the ``call``-th call of ``target.name`` send ``signum`` to this process first."""
    real, count = getattr(target, name), [0]

    def wrapper(*args, **kwargs):
        count[0] += 1
        if count[0] == call:
            os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapper)


@pytest.mark.parametrize("step, call", [("_stage", 1), ("_stage", 3), ("_stage", 4), ("replace", 1), ("replace", 2),
                                        ("replace", 4)])
def test_a_signal_during_the_write_leaves_all_old_or_all_new(runs, capsys, monkeypatch, step, call):
    folder, b, old, new = runs
    _kill_on(monkeypatch, io_module if step == "_stage" else os, step, call, signal.SIGTERM)
    code, err = run(capsys, "fuse", b, "-o", folder / "out" / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")
    assert code == 128 + signal.SIGTERM and "stopped by SIGTERM" in one_error(err)
    after = snapshot(folder / "out")
    assert after == (new if step == "replace" else old)  # renames run with the signal held back
    assert temporaries(folder / "out") == []
    assert spec_matches_model(folder / "out" / "f.onnx")


def test_ctrl_c_during_the_write_is_the_same(runs, capsys, monkeypatch):
    folder, b, old, _ = runs
    _kill_on(monkeypatch, io_module, "_stage", 2, signal.SIGINT)
    # Python's own Ctrl-C handler, as in a terminal: a shell that starts the suite as `pytest &` passes SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code, err = run(capsys, "fuse", b, "-o", folder / "out" / "f.onnx", "--min-gain", "0", "--as-designed",
                        "--allow-scalar")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130 and "stopped by SIGINT" in one_error(err)
    assert snapshot(folder / "out") == old and temporaries(folder / "out") == []


def test_a_signal_while_oppkg_writes_keeps_the_previous_tree(tmp_path, capsys, monkeypatch):
    source = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    _fuse(capsys, source, tmp_path / "f.onnx")
    assert run(capsys, "oppkg", tmp_path / "f.onnx", "-o", tmp_path / "pkg")[0] == 0
    before = snapshot(tmp_path / "pkg")
    _kill_on(monkeypatch, Path, "write_text", 7, signal.SIGTERM)
    code, err = run(capsys, "oppkg", tmp_path / "f.onnx", "-o", tmp_path / "pkg")
    assert code == 143 and "stopped by SIGTERM" in one_error(err)
    assert snapshot(tmp_path / "pkg") == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_real_sigterm_at_any_moment_leaves_a_consistent_folder(tmp_path):
    """The handler as a user meets it: another process, signals at several moments of one run."""
    source = Path(__file__).resolve().parents[2] / "models" / "gptj_block.onnx"
    out = tmp_path / "f.onnx"
    for delay in (0.25, 0.45, 0.65):
        proc = subprocess.Popen([sys.executable, "-m", "hexfuse", "fuse", str(source), "-o", str(out), "--as-designed"],
                                stderr=subprocess.PIPE, text=True)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
        # -SIGTERM: it landed before `main` set the handler, while Python imported hexfuse (nothing written yet)
        assert proc.returncode in (0, 143, -signal.SIGTERM), err
        assert "Traceback" not in err
        if proc.returncode == 143:
            assert "stopped by SIGTERM" in one_error(err)
        assert temporaries(tmp_path) == []
        if out.exists():  # every set present is complete and of one run
            assert spec_matches_model(out) and out.with_suffix(".hexfuse.md").exists()


def test_oppkg_refuses_a_new_model_beside_an_old_spec(runs, capsys):
    """What a SIGKILL (not catchable) between the model's and the spec's rename would leave."""
    folder, _, _, new = runs
    (folder / "out" / "f.onnx").write_bytes(new["f.onnx"])
    code, err = run(capsys, "oppkg", folder / "out" / "f.onnx", "-o", folder / "pkg")
    assert code == 1 and "is not the model" in one_error(err)
    assert not (folder / "pkg").exists()


def test_refusing_carries_the_spec_forward(tmp_path, capsys):
    source = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    _fuse(capsys, source, tmp_path / "once.onnx")
    code, err = run(capsys, "fuse", tmp_path / "once.onnx", "-o", tmp_path / "twice.onnx")
    assert code == 0 and "already fused" in err and "with its spec" in err
    once, twice = (FusionSpec.from_json((tmp_path / f"{n}.hexfuse.json").read_text()) for n in ("once", "twice"))
    assert twice.fused_ops == once.fused_ops and twice.fused_ops
    assert (tmp_path / "twice.onnx").read_bytes() == (tmp_path / "once.onnx").read_bytes()
    assert spec_matches_model(tmp_path / "twice.onnx")
    assert run(capsys, "oppkg", tmp_path / "twice.onnx", "-o", tmp_path / "pkg")[0] == 0


def test_refusing_with_a_stale_spec_beside_is_an_error_and_without_one_says_so(tmp_path, capsys):
    source = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    _fuse(capsys, source, tmp_path / "once.onnx")
    other = builders.save(builders.twin_blocks(), tmp_path / "other.onnx")
    _fuse(capsys, other, tmp_path / "o.onnx")
    (tmp_path / "once.hexfuse.json").write_bytes((tmp_path / "o.hexfuse.json").read_bytes())  # stale spec
    code, err = run(capsys, "fuse", tmp_path / "once.onnx", "-o", tmp_path / "twice.onnx")
    assert code == 1 and "is not the model" in one_error(err) and not (tmp_path / "twice.onnx").exists()
    (tmp_path / "once.hexfuse.json").unlink()
    code, err = run(capsys, "fuse", tmp_path / "once.onnx", "-o", tmp_path / "twice.onnx")
    assert code == 0 and "without a spec" in err


def test_specs_of_schema_3_without_a_model_hash_still_work(tmp_path, capsys):
    source = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    _fuse(capsys, source, tmp_path / "f.onnx")
    spec_file = tmp_path / "f.hexfuse.json"
    raw = json.loads(spec_file.read_text())
    raw["schema_version"] = 3
    del raw["model_sha256"]
    spec_file.write_text(json.dumps(raw))
    assert run(capsys, "oppkg", tmp_path / "f.onnx", "-o", tmp_path / "pkg")[0] == 0
