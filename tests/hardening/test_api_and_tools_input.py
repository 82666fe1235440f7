"""What a hunt of the library API, calibrate and the schematic reader found: wrong types accepted or
failing deep inside (a string as scorer, "no" as allow_scalar), profiles with inf/NaN cycles writing a
NaN target or crashing, a spreadsheet's BOM hiding a column, absurd latencies accepted, and schematic
sections of another shape or an --against without run lists ending in "internal error"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hexfuse
from hexfuse.graph_passes.errors import HexfuseError
from tests import builders
from tests.hardening._support import one_error, run
from tests.tools.test_optrace import SCHEMATIC

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("call", ["fuse_model", "analyze_model"])
def test_a_scorer_that_is_none_is_a_type_error(tmp_path, call):
    model = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    with pytest.raises(TypeError, match="scorer must be a Scorer"):
        getattr(hexfuse, call)(model, "sm8550")


def test_allow_scalar_must_be_a_bool(tmp_path):
    model = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    with pytest.raises(TypeError, match="allow_scalar must be True or False"):
        hexfuse.fuse_model(model, allow_scalar="no")


def test_an_empty_path_is_no_model():
    with pytest.raises(HexfuseError, match="empty model path"):
        hexfuse.fuse_model("")


def _profile(tmp_path: Path, time: str) -> Path:
    rows = ["Message,Event Identifier,Time,Unit of Measurement",
            "NODE,node_linear:OpId_1 (cycles),1000,CYCLES", f"NODE,node_relu:OpId_2 (cycles),{time},CYCLES"]
    (tmp_path / "p.csv").write_text("\n".join(rows) + "\n")
    return tmp_path / "p.csv"


@pytest.mark.parametrize("time", ["nan", "inf", "-5"])
def test_profile_cycles_must_be_finite_and_not_negative(tmp_path, capsys, time):
    profile = _profile(tmp_path, time)
    code, err = run(capsys, "calibrate", profile, "--model", ROOT / "models" / "gptj_block.onnx",
                    "--target", "sm8550", "-o", tmp_path / "t.json")
    assert code == 1 and "cycles must be a finite number" in one_error(err)
    assert not (tmp_path / "t.json").exists()


def _table(tmp_path: Path, milliseconds: str, bom: bool = False) -> Path:
    builders.save(builders.two_branch(16), tmp_path / "m.onnx")
    text = f"model,chipset,precision,milliseconds,onnx\nm,sm8550,float,{milliseconds},m.onnx\n"
    (tmp_path / "t.csv").write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return tmp_path / "t.csv"


def test_a_published_table_saved_with_a_bom_reads(tmp_path, capsys):
    code, err = run(capsys, "calibrate", "--published", _table(tmp_path, "0.5", bom=True), "-o", tmp_path / "f.json")
    assert code == 0, err
    assert json.loads((tmp_path / "f.json").read_text())["name"] == "f"


@pytest.mark.parametrize("milliseconds", ["1e-300", "1e300"])
def test_absurd_published_latencies_are_refused(tmp_path, capsys, milliseconds):
    code, err = run(capsys, "calibrate", "--published", _table(tmp_path, milliseconds), "-o", tmp_path / "f.json")
    assert code == 1 and "must be a number from 1e-6 to 1e7" in one_error(err)
    assert not (tmp_path / "f.json").exists()


@pytest.mark.parametrize("section", ["opdesc_map = [1, 2]", "opdesc_map = {'a': {'args': 5, 'runlist_pos': 1}}",
                                     "opdesc_map = {}\nqnn_name_translations = [1]",
                                     "opdesc_map = {}\nqnn_name_translations = {[1]: 'x'}",
                                     "opdesc_map = {}\ncheckpoints.append(1)", "opdesc_map = {}\ncheckpoints.append()",
                                     "opdesc_map = {}\ncheckpoints.append({1: ['a', 'b']})"])
def test_schematic_sections_of_another_shape_are_one_line(tmp_path, capsys, section):
    schematic = tmp_path / "odd_schematic.bin"
    schematic.write_text(section + "\n")
    code, err = run(capsys, "optrace", schematic)
    assert code == 1 and "not an optrace schematic this reader knows" in one_error(err)


def test_against_a_schematic_without_run_lists_is_one_line(tmp_path, capsys):
    fused = tmp_path / "fused_schematic.bin"
    fused.write_text(SCHEMATIC)
    bare = tmp_path / "bare_schematic.bin"
    bare.write_text("opdesc_map = {}\n")
    code, err = run(capsys, "optrace", fused, "--against", bare)
    assert code == 1 and "holds no run lists" in one_error(err)
