"""Target files: every bundled target loads and cites its numbers; bad files fail with one clear line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hexfuse.graph_passes.cost import list_targets, load_target
from hexfuse.graph_passes.cost.target import FOLDS, TARGETS_DIR, target_from_dict, target_to_dict
from hexfuse.graph_passes.errors import HexfuseError

ROOT = Path(__file__).resolve().parents[2]


REPO = Path(__file__).resolve().parents[2]


def _cites_map(source: str) -> bool:
    """A measured figure names a committed engine map (models/engines/), and that file exists."""
    cited = re.findall(r"models/engines/[\w.-]+\.json", source)
    return bool(cited) and all((REPO / path).is_file() for path in cited)


def test_bundled_targets_load_and_cite_every_number():
    assert set(list_targets()) >= {"sm8550", "sm8650", "sm8750", "x-elite"}
    for name in list_targets():
        target = load_target(name)
        raw = json.loads((TARGETS_DIR / f"{name}.json").read_text())
        entries = [(key, entry) for key, entry in raw.items() if isinstance(entry, dict) and key not in ("folds", "factors")]
        entries += [(f"{table}.{key}", entry) for table in ("folds", "factors") for key, entry in raw.get(table, {}).items()]
        for key, entry in entries:
            source = entry["source"]
            # a fitted number names the committed table it was fitted to (tools/bench/bench_anchors.py --fit)
            fitted = source.startswith("fit: ") and (ROOT / source.split()[1]).is_file()
            assert (fitted or source.startswith("estimate") or "http" in source or "DESIGN.md" in source
                    or _cites_map(source)), (name, key)
        assert target.folds == {"BatchNormalization", "Mul", "Add", *FOLDS["activation"]}, name  # every bundled target folds all
        assert target.vtcm_mb == 8
        assert target.hmx_fp16_macs_per_cycle <= target.hmx_int8_macs_per_cycle


def test_aliases_and_paths():
    assert load_target("v75").name == "sm8650"
    assert load_target("8elite").name == "sm8750"
    assert load_target(TARGETS_DIR / "x-elite.json").name == "x-elite"


def test_round_trip_through_json():
    target = load_target("sm8550").with_values(factors={"conv": 1.5})
    again = target_from_dict(json.loads(json.dumps(target_to_dict(target))), "memory")
    assert again == target


def test_folds_can_be_switched_off_per_epilogue():
    raw = json.loads((TARGETS_DIR / "sm8550.json").read_text())
    raw["folds"]["scale_shift"]["value"] = False
    target = target_from_dict(raw, "memory")
    assert target.folds == {"BatchNormalization", *FOLDS["activation"]}
    raw["folds"]["activation"]["value"] = False
    target = target_from_dict(raw, "memory")
    assert target.folds == {"BatchNormalization"}
    assert target_from_dict(json.loads(json.dumps(target_to_dict(target))), "memory").folds == target.folds
    del raw["folds"]
    assert target_from_dict(raw, "memory").folds == frozenset()


@pytest.mark.parametrize("folds, message", [
    ({"conv_relu": {"value": True, "source": "estimate"}}, "unknown epilogue"),
    ({"batch_norm": {"value": 1, "source": "estimate"}}, "true|false"),
    ({"batch_norm": {"value": True, "source": " "}}, "source must name"),
    ({"batch_norm": True}, "true|false"),
    ([], "expected an object"),
])
def test_bad_folds_name_the_field(folds, message):
    raw = json.loads((TARGETS_DIR / "sm8550.json").read_text())
    raw["folds"] = folds
    with pytest.raises(HexfuseError, match=message):
        target_from_dict(raw, "bad.json")


def _write(tmp_path: Path, raw) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return path


def _good() -> dict:
    return json.loads((TARGETS_DIR / "sm8550.json").read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.pop("vtcm_mb"), "field 'vtcm_mb': missing"),
    (lambda r: r["dma_gbps"].update(value=-3), "field 'dma_gbps': value -3 out of range (> 0)"),
    (lambda r: r["clock_ghz"].update(value="fast"), "field 'clock_ghz': value must be a finite number, got 'fast'"),
    (lambda r: r["hvx_contexts"].update(value=2.5), "field 'hvx_contexts': value must be an integer from 1 to 1024, got 2.5"),
    (lambda r: r["hvx_contexts"].update(value=10**12), "field 'hvx_contexts': value must be an integer from 1 to 1024"),
    (lambda r: r["ddr_npu_fraction"].update(value=1.5), "field 'ddr_npu_fraction': value 1.5 out of range ((0, 1])"),
    (lambda r: r["ddr_gbps"].update(source=""), "field 'ddr_gbps': source must name a public document/URL"),
    (lambda r: r.update(vtcm_size={"value": 8, "source": "x"}), "field 'vtcm_size': unknown field (typo?)"),
    (lambda r: r.update(hmx_fp16_macs_per_cycle={"value": 1e6, "source": "estimate"}),
     "field 'hmx_fp16_macs_per_cycle': exceeds hmx_int8_macs_per_cycle"),
    (lambda r: r.update(factors={"convolution": {"value": 1, "source": "estimate"}}),
     "field 'factors.convolution': unknown op class"),
    (lambda r: r.update(launch_ns=150), 'field \'launch_ns\': expected {"value": number, "source": text}'),
])
def test_bad_values_are_rejected_naming_file_and_field(tmp_path, edit, message):
    raw = _good()
    edit(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(HexfuseError) as error:
        load_target(path)
    text = str(error.value)
    assert text.startswith(f"target {path}: ")
    assert message in text
    assert "\n" not in text


def test_unreadable_and_unknown_targets(tmp_path):
    with pytest.raises(HexfuseError, match=r"bad.json: not valid JSON"):
        load_target(_write(tmp_path, "{ nope"))
    with pytest.raises(HexfuseError, match=r"unknown target 'sm9999' \(known: sm8550, sm8650, sm8750, x-elite"):
        load_target("sm9999")
    with pytest.raises(HexfuseError, match=r"missing.json: cannot read"):
        load_target(tmp_path / "missing.json")
