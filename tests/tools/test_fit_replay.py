"""tools/bench/fit_replay.py: the replay's per-op constants fitted to latencies, on the committed schedules.

The "published" latencies here are replays with known constants, so the fit must find them again, and
the table, the summary and the written target must say what was fitted from what.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

from hexfuse.graph_passes.cost.target import load_target
from hexfuse.graph_passes.engines.engine_map import load_engine_map

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "bench"))
import fit_replay  # noqa: E402

sys.path.pop(0)
# (published name, precision) -> bundled model whose committed sm8650 map holds its schedule
ROWS = {("googlenet", "float"): "googlenet", ("googlenet", "w8a8"): "googlenet_qdq",
        ("gptj_block", "float"): "gptj_block", ("gptj_block", "w8a8"): "gptj_block_qdq"}


@pytest.fixture()
def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    models, maps = tmp_path / "models", tmp_path / "maps"
    models.mkdir()
    maps.mkdir()
    target = load_target("sm8650")
    table = tmp_path / "published.csv"
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["model", "chipset", "runtime", "precision", "milliseconds"])
        for (name, precision), bundled in ROWS.items():
            stem = f"{name}_w8a8" if precision == "w8a8" else name
            shutil.copy(ROOT / "models" / f"{bundled}.onnx", models / f"{stem}.onnx")
            shutil.copy(ROOT / "models" / "engines" / f"{bundled}.sm8650.json", maps / f"{stem}.sm8650.json")
            schedule = load_engine_map(maps / f"{stem}.sm8650.json").schedule
            truth = fit_replay.replayed_ms(schedule, target, 700, 400, 1.0)
            writer.writerow([name, "sm8650", "onnx", precision, f"{truth:.6f}"])
            writer.writerow([name, "sm8750", "onnx", precision, "9.9"])  # another chipset: not read
    return table, models, maps


def test_the_fit_finds_the_constants_the_latencies_were_made_with(folders, capsys) -> None:
    table, models, maps = folders
    assert fit_replay.main(["--published", str(table), "--models", str(models), "--maps", str(maps)]) == 0
    out = capsys.readouterr().out
    assert "fit: qnn_op_ns 700, qnn_hvx_op_ns 400, HMX rates x1.0" in out
    assert "4 rows, 2 models" in out and "Fit (all rows): median |error| 0%" in out
    assert out.count("| googlenet |") == 2 and out.count("| gptj_block |") == 2


def test_write_stores_the_fit_with_its_source(folders, tmp_path: Path, monkeypatch) -> None:
    table, models, maps = folders
    target = tmp_path / "t.json"
    raw = json.loads((ROOT / "qnn_configs" / "targets" / "sm8650.json").read_text())
    target.write_text(json.dumps(raw))
    assert fit_replay.main(["--published", str(table), "--models", str(models), "--maps", str(maps),
                            "--target", str(target), "--write"]) == 0
    fitted = load_target(target)
    assert (fitted.qnn_op_ns, fitted.qnn_hvx_op_ns) == (700, 400)
    assert "replay of QNN's own schedules" in fitted.sources["qnn_op_ns"] and "2 models" in fitted.sources["qnn_op_ns"]


def test_too_few_rows_is_an_error(folders) -> None:
    table, models, maps = folders
    with pytest.raises(SystemExit, match="too few"):
        fit_replay.main(["--published", str(table), "--models", str(models), "--maps", str(maps), "--only", "googlenet"])
