"""Every command writes into a folder that does not exist yet the same way: it makes the folder
(io.folders_made, under io.write_files and io.staging_folder), and when nothing gets written it removes
again what it made. Before, fuse, merge, compile, engines, oppkg and bundle made it while optrace and
calibrate refused with "output directory ... does not exist"."""

from __future__ import annotations

from pathlib import Path

import pytest

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import write_files
from tests import builders
from tests.hardening._support import one_error, run, snapshot
from tests.tools.test_optrace import SCHEMATIC


def _tree(folder: Path) -> dict[str, bytes | None]:
    """``snapshot`` with the folders too (None): proves no folder was left behind."""
    return {**snapshot(folder), **{p.relative_to(folder).as_posix(): None for p in folder.rglob("*") if p.is_dir()}}


def test_write_files_makes_missing_folders(tmp_path):
    files = [(tmp_path / "a" / "b" / "x.bin", b"x"), (tmp_path / "c" / "y.bin", b"y")]
    write_files(files)
    assert [path.read_bytes() for path, _ in files] == [b"x", b"y"]


def test_folders_made_are_removed_when_nothing_is_written(tmp_path):
    (tmp_path / "taken").mkdir()  # a folder where a file should go: staging fails after the folders are made
    before = _tree(tmp_path)
    with pytest.raises(HexfuseError, match="is a directory"):
        write_files([(tmp_path / "new" / "deeper" / "x.bin", b"x"), (tmp_path / "taken", b"y")])
    assert _tree(tmp_path) == before


def _another_run_makes_them_first(monkeypatch):
    """Between the look for missing folders and the mkdir, another run makes them (the race of two
    fuse runs onto one new -o folder, seen in CI as "cannot create output directory ...: File exists")."""
    from hexfuse.graph_passes.load import io
    look = io._folders_to_make

    def look_then_race(folder):
        missing = look(folder)
        folder.mkdir(parents=True, exist_ok=True)
        return missing
    monkeypatch.setattr(io, "_folders_to_make", look_then_race)


def test_a_folder_another_run_made_meanwhile_is_used(tmp_path, monkeypatch):
    _another_run_makes_them_first(monkeypatch)
    write_files([(tmp_path / "a" / "b" / "x.bin", b"x")])
    assert (tmp_path / "a" / "b" / "x.bin").read_bytes() == b"x"


def test_a_failed_write_leaves_the_folders_another_run_made(tmp_path, monkeypatch):
    _another_run_makes_them_first(monkeypatch)
    (tmp_path / "taken").mkdir()
    with pytest.raises(HexfuseError, match="is a directory"):
        write_files([(tmp_path / "a" / "b" / "x.bin", b"x"), (tmp_path / "taken", b"y")])
    assert (tmp_path / "a" / "b").is_dir()  # not ours to remove: the other run writes into it


def test_a_path_through_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "file").write_text("mine")
    with pytest.raises(HexfuseError, match="is not a directory"):
        write_files([(tmp_path / "file" / "sub" / "x.bin", b"x")])
    assert (tmp_path / "file").read_text() == "mine"


def test_optrace_writes_png_and_trace_into_a_new_folder(tmp_path, capsys):
    schematic = tmp_path / "fused_schematic.bin"
    schematic.write_text(SCHEMATIC, encoding="utf-8")
    png, trace = tmp_path / "new" / "lanes.png", tmp_path / "new" / "deeper" / "trace.json"
    code, err = run(capsys, "optrace", schematic, "--png", png, "--trace", trace)
    assert code == 0, err
    assert png.read_bytes().startswith(b"\x89PNG") and trace.read_bytes().startswith(b'{"traceEvents"')


def test_optrace_writes_both_files_or_neither(tmp_path, capsys):
    schematic = tmp_path / "fused_schematic.bin"
    schematic.write_text(SCHEMATIC, encoding="utf-8")
    (tmp_path / "taken.json").mkdir()
    before = _tree(tmp_path)
    code, err = run(capsys, "optrace", schematic, "--png", tmp_path / "new" / "lanes.png",
                    "--trace", tmp_path / "taken.json")
    assert code == 1 and "is a directory" in one_error(err)
    assert _tree(tmp_path) == before  # no png, and no folder made for it


def test_calibrate_writes_into_a_new_folder(tmp_path, capsys):
    builders.save(builders.two_branch(16), tmp_path / "m.onnx")
    (tmp_path / "t.csv").write_text("model,chipset,precision,milliseconds,onnx\nm,sm8550,float,0.5,m.onnx\n")
    out = tmp_path / "targets" / "fitted.json"
    code, err = run(capsys, "calibrate", "--published", tmp_path / "t.csv", "-o", out)
    assert code == 0, err
    assert out.read_text().startswith("{")


@pytest.mark.parametrize("command", ["fuse", "merge"])
def test_fuse_and_merge_write_into_a_new_folder(tmp_path, capsys, command):
    model = builders.save(builders.two_branch(16), tmp_path / "m.onnx")
    out = tmp_path / "new" / "deeper" / "out.onnx"
    args = [model, "-o", out, "--no-verify"] if command == "fuse" else [model, model, "-o", out]
    code, err = run(capsys, command, *args)
    assert code == 0, err
    assert out.is_file()
