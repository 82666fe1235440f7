"""Class 3, outputs overwriting inputs: `-o m.data` overwrote the input's weights, `-o x.onnx` the
input `x.hexfuse.json`; only output == input was checked. A nothing-to-fuse copy of an external-data
model into another folder lost its data. Now no output may be the input, its external data or any
file hexfuse writes beside it (symlinks and hard links included), for fuse, merge and ab alike; and
copies are self-contained."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests import builders
from tests.hardening._support import one_error, run, snapshot


def _external(folder: Path, model: onnx.ModelProto, name: str = "m") -> Path:
    path = folder / f"{name}.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=f"{name}.data", size_threshold=0)
    return path


@pytest.mark.parametrize("verify", [[], ["--no-verify"]])
def test_output_onto_the_external_data_is_refused(tmp_path, capsys, verify):
    model = _external(tmp_path, builders.two_branch(32))
    before = snapshot(tmp_path)
    code, err = run(capsys, "fuse", model, "-o", tmp_path / "m.data", *verify)
    assert code == 1 and "external data" in one_error(err)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("input_name, output_name", [
    ("x.hexfuse.json", "x.onnx"),   # the input is called like the output's spec
    ("x.hexfuse.md", "x.onnx"),     # ... or like its report
    ("x.onnx", "x.bin"),            # the output's spec would be the input's spec x.hexfuse.json
    ("x.onnx", "x.timeline.json"),  # its spec x.timeline.hexfuse.json is fine, but x.timeline.json is the input's
])
def test_outputs_never_overwrite_the_input_or_its_sidecars(tmp_path, capsys, input_name, output_name):
    (tmp_path / input_name).write_bytes(builders.two_branch(32).SerializeToString())  # onnx.save goes by suffix
    for sidecar in ("x.hexfuse.json", "x.hexfuse.md", "x.timeline.json"):  # an earlier run's files
        if not (tmp_path / sidecar).exists():
            (tmp_path / sidecar).write_text("kept")
    before = snapshot(tmp_path)
    code, err = run(capsys, "fuse", tmp_path / input_name, "-o", tmp_path / output_name, "--min-gain", "0", "--as-designed", "--allow-scalar")
    assert code == 1 and "refusing to overwrite" in one_error(err)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_links_to_the_input_are_the_input(tmp_path, capsys, link):
    source = Path(builders.save(builders.two_branch(32), tmp_path / "m.onnx"))
    alias = tmp_path / "alias.onnx"
    (os.symlink if link == "symlink" else os.link)(source, alias)
    before = source.read_bytes()
    code, err = run(capsys, "fuse", source, "-o", alias, "--min-gain", "0", "--as-designed", "--allow-scalar")
    assert code == 1 and "the input model" in one_error(err)
    assert source.read_bytes() == before


def test_merge_never_overwrites_an_input_or_its_sidecars(tmp_path, capsys):
    a = builders.save(builders.two_branch(32), tmp_path / "a.onnx")
    b = _external(tmp_path, builders.chain(32), "b")
    (tmp_path / "a.hexfuse.json").write_text("{}")
    before = snapshot(tmp_path)
    for out in (tmp_path / "b.data", tmp_path / "a.bin", tmp_path / "a.onnx"):  # a.bin: a.merge.json is fine, a.hexfuse.json isn't
        code, err = run(capsys, "merge", a, b, "-o", out)
        assert code == 1 and "refusing to overwrite" in one_error(err), out
    assert snapshot(tmp_path) == before


def test_ab_report_dir_never_overwrites_what_it_reads(tmp_path, capsys):
    original = tmp_path / "report.json"  # a model named like a report file
    original.write_bytes(builders.two_branch(32).SerializeToString())
    code, err = run(capsys, "fuse", original, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")
    assert code == 0, err
    before = snapshot(tmp_path)
    code, err = run(capsys, "ab", original, tmp_path / "f.onnx", "-o", tmp_path, "--no-cpu-package", "-q")
    assert code == 1 and "would overwrite" in one_error(err)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("model", ["chain", "two_branch"])
def test_copies_of_external_data_models_are_self_contained(tmp_path, capsys, model):
    """Nothing to fuse (chain) writes a copy, fused (two_branch) a new model: both load alone elsewhere."""
    (tmp_path / "in").mkdir()
    source = _external(tmp_path / "in", getattr(builders, model)(32))
    out = tmp_path / "elsewhere" / "out.onnx"
    assert run(capsys, "fuse", source, "-o", out, "--allow-scalar", "--as-designed")[0] == 0
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(
        p for p in ("out.onnx", "out.hexfuse.json", "out.hexfuse.md", "out.timeline.json")
        if model == "two_branch" or p != "out.timeline.json")
    onnx.checker.check_model(str(out), full_check=True)
    feeds = {"x": np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)}
    want = ort.InferenceSession(str(source)).run(None, feeds)
    got = ort.InferenceSession(out.read_bytes()).run(None, feeds)  # bytes: no folder to find data in
    assert all(np.allclose(w, g, rtol=1e-5, atol=1e-6) for w, g in zip(want, got))


@pytest.mark.parametrize("which", ["profile", "model", "target"])
def test_calibrate_never_overwrites_what_it_reads(tmp_path, capsys, which):
    files = {"profile": tmp_path / "p.csv", "model": tmp_path / "m.onnx", "target": tmp_path / "t.json"}
    files["profile"].write_text("Event Identifier,Value\n")
    files["model"].write_bytes(builders.two_branch(16).SerializeToString())
    files["target"].write_text("{}")
    before = snapshot(tmp_path)
    code, err = run(capsys, "calibrate", files["profile"], "--model", files["model"], "--target", files["target"],
                    "-o", files[which])
    assert code == 1 and f"refusing to overwrite the {'base target' if which == 'target' else which}" in one_error(err)
    assert snapshot(tmp_path) == before


def test_output_onto_a_fifo_is_refused(tmp_path, capsys):
    model = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    os.mkfifo(tmp_path / "out.onnx")  # renaming over it would replace the node (as root: /dev/full too)
    code, err = run(capsys, "fuse", model, "-o", tmp_path / "out.onnx", "--no-verify")
    assert code == 1 and "not a regular file" in one_error(err)
    assert (tmp_path / "out.onnx").is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]


def test_fuse_never_overwrites_its_target_file(tmp_path, capsys):
    model = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    target = tmp_path / "out.hexfuse.md"  # the output's report
    target.write_bytes((Path(__file__).parents[2] / "qnn_configs" / "targets" / "sm8550.json").read_bytes())
    before = snapshot(tmp_path)
    code, err = run(capsys, "fuse", model, "--target", target, "-o", tmp_path / "out.onnx", "--no-verify")
    assert code == 1 and "refusing to overwrite the target file" in one_error(err)
    assert snapshot(tmp_path) == before


def test_a_timeline_of_an_earlier_fusion_does_not_stay_beside_a_new_model(tmp_path, capsys):
    fusable, plain = (builders.save(m, tmp_path / n) for m, n in ((builders.two_branch(32), "a.onnx"),
                                                                  (builders.chain(32), "b.onnx")))
    out = tmp_path / "out" / "m.onnx"
    assert run(capsys, "fuse", fusable, "-o", out, "--min-gain", "0", "--as-designed", "--allow-scalar", "--no-verify")[0] == 0
    assert (tmp_path / "out" / "m.timeline.json").is_file()
    assert run(capsys, "fuse", plain, "-o", out, "--no-verify")[0] == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.hexfuse.json", "m.hexfuse.md", "m.onnx"]
    kept = out.parent / "m.timeline.json"  # ... unless the run reads it
    kept.write_bytes((Path(__file__).parents[2] / "qnn_configs" / "targets" / "sm8550.json").read_bytes())
    assert run(capsys, "fuse", plain, "-o", out, "--target", kept, "--no-verify")[0] == 0
    assert kept.is_file()


@pytest.mark.parametrize("flag", ["--inputs", "--schematic"])
def test_compile_never_overwrites_what_it_reads(tmp_path, capsys, flag):
    model = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    (tmp_path / "in.npz").write_bytes(b"kept")
    before = snapshot(tmp_path)
    argv = ["--inputs", tmp_path / "in.npz", "-o", tmp_path / "in.npz"] if flag == "--inputs" else \
        ["--schematic", model, "-o", tmp_path / "ctx.onnx"]
    code, err = run(capsys, "compile", model, *argv)
    assert code == 1 and "refusing to overwrite" in one_error(err)
    assert snapshot(tmp_path) == before


def test_calibrate_never_overwrites_a_model_its_table_names(tmp_path, capsys):
    builders.save(builders.two_branch(16), tmp_path / "m.onnx")
    (tmp_path / "t.csv").write_text("model,chipset,precision,milliseconds,onnx\nm,sm8550,float,0.5,m.onnx\n")
    before = snapshot(tmp_path)
    code, err = run(capsys, "calibrate", "--published", tmp_path / "t.csv", "-o", tmp_path / "m.onnx")
    assert code == 1 and "refusing to overwrite a model the table names" in one_error(err)
    assert snapshot(tmp_path) == before
