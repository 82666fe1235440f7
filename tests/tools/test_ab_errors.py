"""Bad inputs end in one line `hexfuse: error: ...` and exit code 1, before any session work."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from ab_testmodels import HOST_BUILD, REFUSING_QNN_PACKAGE, fake_library, make_original, run_cli

from hexfuse.tools.ab import qnn_session


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no error printed"
    assert err[-1].startswith("hexfuse: error: ")
    return err[-1]


def _ab(orig, fused, *extra, tmp_path):
    return run_cli(["ab", str(orig), str(fused), "--iters", "2", "--warmup", "0", "-q",
                    "-o", str(tmp_path / "r"), *extra])


def test_missing_model(tiny_pair, tmp_path, capsys):
    orig, _ = tiny_pair
    assert _ab(orig, tmp_path / "nope.onnx", tmp_path=tmp_path) == 1
    assert "model file not found" in _err(capsys) and not (tmp_path / "r").exists()


def test_not_onnx(tiny_pair, tmp_path, capsys):
    orig, _ = tiny_pair
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xfe this is not protobuf \x00\x01" * 10)
    assert _ab(orig, junk, tmp_path=tmp_path) == 1
    assert "is not an ONNX model" in _err(capsys)


def test_mismatched_input_names(tiny_pair, tmp_path, capsys):
    _, fused = tiny_pair
    other = tmp_path / "other.onnx"
    onnx.save(make_original(a_name="x"), str(other))
    assert _ab(other, fused, tmp_path=tmp_path) == 1
    msg = _err(capsys)
    assert "models differ in input names" in msg and "'x'" in msg and "'a'" in msg


def test_mismatched_output_shape(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    m = onnx.load(fused)
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 17
    bad = tmp_path / "bad.onnx"
    onnx.save(m, str(bad))
    assert _ab(orig, bad, tmp_path=tmp_path) == 1
    assert "models differ in output 'y1'" in _err(capsys)


@pytest.mark.parametrize("arrays,needle", [
    ({"a": np.zeros((4, 16), np.float32)}, "missing ['b']"),
    ({"a": np.zeros((4, 16), np.float32), "b": np.zeros((4, 32), np.float32), "c": np.zeros(1)}, "unexpected ['c']"),
    ({"a": np.zeros((4, 15), np.float32), "b": np.zeros((4, 32), np.float32)}, "input 'a' has shape [4, 15]"),
    ({"a": np.zeros((4, 16), np.float64), "b": np.zeros((4, 32), np.float32)}, "input 'a' has dtype float64"),
])
def test_bad_npz(tiny_pair, tmp_path, capsys, arrays, needle):
    orig, fused = tiny_pair
    npz = tmp_path / "in.npz"
    np.savez(npz, **arrays)
    assert _ab(orig, fused, "--inputs", str(npz), tmp_path=tmp_path) == 1
    assert needle in _err(capsys)


def test_unknown_preset(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    assert _ab(orig, fused, "--ep", "qnn", "--qnn-config", "htp_v99_turbo", tmp_path=tmp_path) == 1
    msg = _err(capsys)
    assert "unknown QNN preset 'htp_v99_turbo'" in msg and "htp_sim" in msg


@pytest.mark.parametrize("cfg,needle", [
    ({"provider_options": {"htp_perf_mode": "burst"}}, "unknown provider option 'htp_perf_mode'"),
    ({"provider_options": {"htp_performance_mode": "warp"}}, "bad value 'warp' for htp_performance_mode"),
    ({"provider_options": {"vtcm_mb": "lots"}}, "bad value 'lots' for vtcm_mb"),
    ({"provider_options": {"enable_htp_fp16_precision": "1"}}, "needs soc_model"),
    ({"provider_options": {}, "profile": 1}, "unknown key 'profile'"),
    ({"provider_options": {}, "disable_cpu_ep_fallback": "yes"}, "disable_cpu_ep_fallback must be true or false"),
])
def test_bad_preset_file(tiny_pair, tmp_path, capsys, cfg, needle):
    orig, fused = tiny_pair
    f = tmp_path / "cfg.json"
    f.write_text(json.dumps(cfg))
    assert _ab(orig, fused, "--ep", "qnn", "--qnn-config", str(f), tmp_path=tmp_path) == 1
    assert needle in _err(capsys)


def test_missing_op_package_library(tiny_pair, tmp_path, capsys, monkeypatch):
    orig, fused = tiny_pair
    made = []
    monkeypatch.setattr("tools.ab.sessions.make_session", lambda *a, **k: made.append(a))
    assert _ab(orig, fused, "--ep", "qnn", "--op-package", str(tmp_path / "libHexFuse.so"), tmp_path=tmp_path) == 1
    assert "op package library not found" in _err(capsys)
    assert made == [] and not (tmp_path / "r").exists()


def test_op_package_not_a_library(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    txt = tmp_path / "libHexFuse.so"
    txt.write_text("not elf")
    assert _ab(orig, fused, "--ep", "qnn", "--op-package", str(txt), tmp_path=tmp_path) == 1
    assert "not a shared library" in _err(capsys)


def test_truncated_elf_op_package(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    lib = tmp_path / "libHexFuse.so"
    lib.write_bytes(b"\x7fELF" + b"\0" * 60)
    assert _ab(orig, fused, "--op-package", str(lib), tmp_path=tmp_path) == 1
    assert "is not an ELF shared library" in _err(capsys)


@pytest.mark.parametrize("ep,needle", [
    ("cpu", "is a hexfuse host build (exports hexfuse_run), not an ONNX Runtime custom-op library"),
    ("qnn", "is a hexfuse host build (exports hexfuse_run, no HexFuseInterfaceProvider), not a QNN HTP op package"),
])
def test_host_build_as_op_package_says_what_it_is(tiny_pair, tmp_path, capsys, ep, needle):
    orig, fused = tiny_pair
    lib = fake_library(tmp_path, "HexFuseHost", HOST_BUILD)
    assert _ab(orig, fused, "--ep", ep, "--op-package", lib, tmp_path=tmp_path) == 1
    assert needle in _err(capsys) and not (tmp_path / "r").exists()


def test_qnn_package_name_must_match(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    lib = fake_library(tmp_path, "HexFuseRefusing", REFUSING_QNN_PACKAGE)
    assert _ab(orig, fused, "--ep", "qnn", "--op-package", lib, "--op-package-name", "Other", tmp_path=tmp_path) == 1
    msg = _err(capsys)
    assert "exports HexFuseInterfaceProvider, not OtherInterfaceProvider: pass --op-package-name HexFuse" in msg


@pytest.mark.parametrize("args,needle", [
    (["--seed", "-1"], "--seed must be in [0,"),
    (["--iters", str(10**23)], "--iters must be in [2, 1000000]"),
    (["--iters", "1"], "--iters must be in [2,"),
    (["--warmup", "-3"], "--warmup must be in [0,"),
    (["--profile-runs", "0"], "--profile-runs must be in [1,"),
    (["--atol", "-0.001"], "--atol must be a finite number >= 0"),
    (["--rtol", "nan"], "--rtol must be a finite number >= 0"),
    (["--min-cosine", "1.5"], "--min-cosine must be in [-1, 1]"),
    (["--qnn-config", "htp_sim"], "--qnn-config needs --ep qnn"),
])
def test_bad_arguments_are_one_line_errors(tiny_pair, tmp_path, capsys, args, needle):
    orig, fused = tiny_pair
    assert run_cli(["ab", orig, fused, "-q", "-o", str(tmp_path / "r"), *args]) == 1
    assert needle in _err(capsys) and not (tmp_path / "r").exists()


def test_report_dir_that_is_a_file(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    assert run_cli(["ab", orig, fused, "-q", "-o", str(taken)]) == 1
    assert "exists and is not a directory" in _err(capsys) and taken.read_text() == "keep me"


def test_qnn_requested_but_absent(tiny_pair, tmp_path, capsys, monkeypatch):
    orig, fused = tiny_pair
    monkeypatch.setattr(qnn_session, "qnn_available", lambda: False)
    assert _ab(orig, fused, "--ep", "qnn", tmp_path=tmp_path) == 1
    assert "needs the onnxruntime-qnn package" in _err(capsys)
