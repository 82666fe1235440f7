"""Figures README.md and docs/ quote from a command's output, rerun and compared: a change that moves one
fails here, and the text is updated with it (issue 21, "docs that cannot drift")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest

import hexfuse
from hexfuse.cli import main
from hexfuse.graph_passes.cost.cli import scorer_for
from tests import builders

ROOT = Path(__file__).resolve().parents[1]
README = " ".join((ROOT / "README.md").read_text().split())
GUIDE = " ".join((ROOT / "docs" / "guide.md").read_text().split())
ENGINES_DOC = " ".join((ROOT / "docs" / "engines.md").read_text().split())


def _cli(capsys, *argv) -> tuple[str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return out.out, out.err if code == 0 else f"exit {code}: {out.err}"


def test_prefill_decode_merge_group_counts(tmp_path, capsys):
    merged = tmp_path / "pd.onnx"
    _cli(capsys, "merge", ROOT / "models" / "llama_prefill.onnx", ROOT / "models" / "llama_decode.onnx", "-o", merged,
         "--names", "prefill", "decode")
    counts = []
    for extra in (["--as-designed"], ["--allow-scalar", "--as-designed"]):
        groups = json.loads(_cli(capsys, "analyze", merged, "--json", *extra)[0])["groups"]
        counts.append((sum(g["source"].startswith("request") for g in groups), len(groups)))
    (requests, total), (_, total_scalar) = counts
    assert f"# {requests} of {total} groups pair work of the two requests ({total_scalar} with --allow-scalar)" in GUIDE


def test_the_gptj_block_group_count(tmp_path, capsys):
    """The guide's GPT-J block, default target: priced as the package builds a fused node nothing pays, as
    designed some groups would."""
    model = ROOT / "models" / "gptj_block.onnx"
    _, err = _cli(capsys, "fuse", model, "-o", tmp_path / "gptj_block.fused.onnx", "--no-verify")
    assert "nothing to fuse" in err and "would pair but for what the generated package adds" in err, err
    _, err = _cli(capsys, "fuse", model, "-o", tmp_path / "designed.onnx", "--no-verify", "--as-designed")
    groups = re.search(r"with (\d+) fused nodes?", err)
    assert groups, err
    assert f"`--as-designed` prices the design's fused node instead and fuses {groups.group(1)} groups" in GUIDE
    out, err = _cli(capsys, "analyze", model, "--json")
    reasons = [task["reason"] for task in json.loads(out)["not_fused"]["tasks"]]
    added = sorted(float(m.group(1)) for r in reasons if (m := re.search(r"package: holding the group together adds "
                                                                          r"([\d.]+) us", r)))
    assert added, reasons
    assert (f"on gptj_block (sm8550), {len(added)} tasks would pair but for those ops, which add "
            f"{added[0]:.2f}-{added[-1]:.2f} us to each group") in GUIDE
    assert f"{len(added)} tasks would pair but for what the generated package adds" in err


def test_the_first_command_combines_as_the_readme_says(tmp_path, capsys):
    from hexfuse.graph_passes.combine.run import combine_requests

    _, err = _cli(capsys, "combine", ROOT / "models" / "llama_prefill_decode.onnx", "-o", tmp_path / "c.onnx")
    assert re.search(r"1 of \d+ chains combined across 2 requests \(prefill, decode\)", err), err
    result = combine_requests(ROOT / "models" / "llama_prefill_decode.onnx", verify=False)
    rows = result.prices[result.chosen[0]].rows
    assert rows == (16, 1) and f"run once on the {sum(rows)} rows of both" in README
    assert "a 16-token prefill and a 1-token decode" in README


def _predicted(err: str) -> str:
    match = re.search(r"predicts (\d+ fused groups, [\d.]+ us vs [\d.]+ us unsplit \([^)]*\))", err)
    assert match, err
    return match.group(1)


def test_mlp_chain_micro_batch_figures(tmp_path, capsys):
    chain = ROOT / "models" / "mlp_chain.onnx"
    assert f"split and fused it predicts {_predicted(_cli(capsys, 'analyze', chain, '--micro-batches', '2')[1])}" in GUIDE
    _, err = _cli(capsys, "fuse", chain, "-o", tmp_path / "x.onnx", "--micro-batches", "2", "--split", "always")
    ratio = re.search(r"predicted ([\d.]+x) slower", err)
    assert ratio and f"refuses without `--force` ({ratio.group(1)} slower)" in GUIDE, err
    long = onnx.load(chain)
    for info in (long.graph.input[0], long.graph.output[0]):
        info.type.tensor_type.shape.dim[1].dim_value = 4096
    del long.graph.value_info[:]
    path = builders.save(long, tmp_path / "long.onnx")
    assert f"At 4096 tokens the split alone predicts {_predicted(_cli(capsys, 'analyze', path, '--micro-batches', '2')[1])}" in GUIDE


@pytest.mark.skipif(not Path(builders.LIGHT_DIR).is_dir(), reason="the onnx wheel ships no light models")
def test_light_models_the_command_line_fuses():
    fused = [p.stem.removeprefix("light_").removeprefix("bvlc_")
             for p in sorted(Path(builders.LIGHT_DIR).glob("light_*.onnx"))
             if hexfuse.analyze_model(p, scorer_for("sm8550", 0.1)).fused_ops]
    assert f"Fused by the command line (sm8550): {', '.join(fused) or 'none'}." in GUIDE


@pytest.mark.parametrize("model, figures", [
    ("llama_prefill_decode_qdq", "llama_prefill_decode_qdq fuses {groups} groups, predicted {total} of the serial time "
                                 "(entry merge {merge}, overlap {overlap}), and {constants} of the {saved} us"),
    ("gptj_block_qdq", "gptj_block_qdq fuses {groups} groups, {total} ({merge} + {overlap}), {constants} of {saved} us"),
])
def test_engines_doc_lm_figures(capsys, model, figures):
    data = json.loads(_cli(capsys, "analyze", ROOT / "models" / f"{model}.onnx", "--target", "sm8650", "--ignore-schedule",
                           "--as-designed", "--json")[0])
    summary, splits = data["summary"], [g["gain_split"] for g in data["groups"] if g.get("gain_split")]
    expected = figures.format(
        groups=len(data["groups"]), total=f"{summary['total_gain']:.1%}", merge=f"{summary['entry_merge_gain']:.1%}",
        overlap=f"{summary['overlap_gain']:.1%}", saved=f"{sum(s['saved_us'] for s in splits):.1f}",
        constants=f"{sum(s['from_dispatch_us'] + s['from_hvx_launch_us'] for s in splits):.1f}")
    assert expected in ENGINES_DOC


def test_engines_doc_map_table_counts_what_the_committed_maps_hold():
    """docs/engines.md, 'What the committed maps say': nodes with ops and where, from models/engines/."""
    from collections import Counter

    from hexfuse.graph_passes.engines.engine_map import load_engine_map

    for path in sorted((ROOT / "models" / "engines").glob("*.json")):
        engine_map = load_engine_map(path)
        with_ops = [node for node in engine_map.nodes.values() if node.kernels]
        where = Counter(node.resource for node in with_ops)
        stem = path.name.split(".")[0]
        row = re.search(rf"\| {stem}(?: \(fp16\))? \| (\d+) \((?:matrix on )?HMX (\d+), HVX (\d+)\) \|", ENGINES_DOC)
        assert row, stem
        assert tuple(map(int, row.groups())) == (len(with_ops), where["hmx"], where["hvx"]), stem
    googlenet = load_engine_map(ROOT / "models" / "engines" / "googlenet.sm8650.json")
    relus = sum(1 for name, node in googlenet.nodes.items() if node.folded_into and "relu" in name)
    assert f"{relus} Relu folded into their Conv" in ENGINES_DOC and f"googlenet map: {relus} of {relus} Relu" in ENGINES_DOC
    for target in (ROOT / "qnn_configs" / "targets").glob("*.json"):  # the targets cite the same count
        assert f"shows all {relus} Relus folded" in json.loads(target.read_text())["folds"]["activation"]["source"]
