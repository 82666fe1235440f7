"""`hexfuse ab A B` without -o writes its report where the user stands, never beside the models (which
may sit in a repository or a read-only folder)."""

from __future__ import annotations

from pathlib import Path

from hexfuse.tools.ab.options import AbOptions, check_options


def test_the_default_report_folder_is_in_the_working_folder(tmp_path: Path, monkeypatch) -> None:
    models = tmp_path / "repo" / "models"
    models.mkdir(parents=True)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    out = check_options(AbOptions(str(models / "m.onnx"), str(models / "m.fused.onnx")))
    assert out.resolve() == here / "m.fused_ab"
    given = check_options(AbOptions(str(models / "m.onnx"), str(models / "m.fused.onnx"), report_dir=str(tmp_path / "r")))
    assert given == tmp_path / "r"
