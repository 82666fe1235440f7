"""Where the ONNX Runtime C API headers come from, and the version check against the installed runtime."""

from __future__ import annotations

import pytest

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.op_package import ort_headers


def _fake(tmp_path, version: int):
    (tmp_path / "onnxruntime_c_api.h").write_text(f"#define ORT_API_VERSION {version}\n")
    (tmp_path / "onnxruntime_cxx_api.h").write_text("\n")
    return tmp_path


def test_env_dir_wins_and_must_hold_the_headers(tmp_path, monkeypatch):
    monkeypatch.setenv("ORT_INCLUDE_DIR", str(tmp_path))
    with pytest.raises(HexfuseError, match="holds no onnxruntime_c_api.h"):
        ort_headers.find_headers()
    _fake(tmp_path, 21)
    assert ort_headers.find_headers() == tmp_path and ort_headers.api_version(tmp_path) == 21


def test_headers_newer_than_the_runtime_are_refused(tmp_path):
    ort_headers.check_runtime(_fake(tmp_path, 1))
    with pytest.raises(HexfuseError, match="newer than the installed onnxruntime"):
        ort_headers.check_runtime(_fake(tmp_path, 999))


def test_missing_headers_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.delenv("ORT_INCLUDE_DIR", raising=False)
    monkeypatch.setenv("HEXFUSE_CACHE", str(tmp_path))
    monkeypatch.setattr(ort_headers, "SYSTEM_DIR", tmp_path / "none")
    with pytest.raises(HexfuseError, match="python -m hexfuse.op_package.ort_headers"):
        ort_headers.require_headers()
