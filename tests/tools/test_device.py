"""hexfuse bundle / compile / ab --import without a QNN SDK (host tests; the SDK path is test_device_sdk.py).

The bundle is made from the bundled GoogLeNet and its fused copy. Device results are fabricated here in
the format run_ab.py writes (outputs from ONNX Runtime's CPU EP, profiles in QNN's CSV format) so that
the import path is checked on machines without the simulator.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from hexfuse.cli import main as hexfuse_main
from hexfuse.graph_passes.cost.calibrate import synthesize_profile
from hexfuse.graph_passes.cost.target import load_target
from hexfuse.tools.device import bundle as bundle_mod
from hexfuse.tools.device import run_script
from tests.builders import unfolded_activation_target

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "googlenet.onnx"


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("device")
    fused = d / "googlenet.fused.onnx"
    # every fusable group (the bundle's mechanics are under test, not the payoff: on sm8650 GoogLeNet's
    # float ReLUs fold into QNN's convs and nothing pays; with the fold, nothing is even fusable on HTP
    # yet: tests/builders.py unfolded_activation_target; the replay of QNN's schedule rejects every group)
    assert hexfuse_main(["fuse", str(MODEL), "-o", str(fused), "--target", unfolded_activation_target("sm8650"),
                         "--no-verify", "--allow-scalar", "--allow-merge-only", "--min-gain", "0", "--as-designed",
                         "--ignore-schedule"]) == 0
    return MODEL, fused


def _bundle(pair, out: Path, *extra: str) -> int:
    return hexfuse_main(["bundle", str(pair[0]), str(pair[1]), "-o", str(out), "--target", "sm8650", *extra])


@pytest.fixture(scope="module")
def made(pair, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b") / "bundle"
    assert _bundle(pair, out, "--no-build") == 0
    return out


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _err(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and lines[-1].startswith("hexfuse: error: "), lines
    return lines[-1]


def test_bundle_without_sdk_holds_sources_commands_and_options(made: Path, pair) -> None:
    files = _tree(made)
    (made.parent / "by_mkdir").mkdir(exist_ok=True)  # staged in a temporary folder: not mkdtemp's 0700
    assert made.stat().st_mode == (made.parent / "by_mkdir").stat().st_mode
    for need in ("README.md", "bundle.json", "run_ab.py", "build.sh", "inputs.npz", "provider_options.json",
                 "models/original.onnx", "models/fused_serial0.onnx", "models/fused_serial1.onnx",
                 "models/fused.hexfuse.json", "package/Makefile", "package/config/HexFuse.xml"):
        assert need in files, need
    assert not any(f.startswith("contexts/") for f in files), "no SDK: no context binaries"
    assert not any(f.endswith(".so") for f in files), "no SDK: no library"
    assert (made / "run_ab.py").read_bytes() == Path(run_script.__file__).read_bytes()
    build = (made / "build.sh").read_text()
    for command in ("make -C package htp_v75", "make -C package htp_aarch64", "make -C package htp_x86",
                    "hexfuse compile models/original.onnx -o contexts/b2_original_best.ctx.onnx --target sm8650",
                    "hexfuse compile models/fused_serial1.onnx --package package -o contexts/b3_fused_serial.ctx.onnx",
                    "hexfuse compile models/fused_serial0.onnx --inline -o contexts/fused_inlined.ctx.onnx"):
        assert command in build, command
    options = json.loads((made / "provider_options.json").read_text())
    assert options["provider_options"]["soc_model"] == "57" and options["provider_options"]["htp_arch"] == "75"
    assert options["disable_cpu_ep_fallback"] is True
    manifest = json.loads((made / "bundle.json").read_text())
    assert manifest["target"]["hexagon"] == "v75"
    libs = manifest["package"]["libraries"]
    assert libs["android-aarch64"][1] == {"path": "package/build/hexagon-v75/libQnnHexFuse.so", "target": "HTP",
                                          "needed_for": ["context", "onnx"]}
    assert libs["x86_64-linux"][0]["path"] == "package/build/x86_64-linux-clang/libQnnHexFuse.so"
    fused = onnx.load(str(pair[1]), load_external_data=False)
    count = sum(1 for n in fused.graph.node if n.domain == "hexfuse")
    runs = {r["key"]: r for r in manifest["runs"]}
    assert sum(runs["b3_fused_serial"]["claims"].values()) == count == manifest["fused"]["fused_nodes"]
    for key, serial in (("b3_fused_serial", 1), ("b4_fused_concurrent", 0)):
        model = onnx.load(str(made / runs[key]["model"]), load_external_data=False)
        values = {a.i for n in model.graph.node if n.domain == "hexfuse" for a in n.attribute if a.name == "serial"}
        assert values == {serial}, key
    assert (made / "models" / "original.onnx").read_bytes() == pair[0].read_bytes()


def test_bundle_inputs_match_the_model_and_the_folder_is_deterministic(made: Path, pair, tmp_path: Path) -> None:
    with np.load(made / "inputs.npz") as z:
        feeds = {k: z[k] for k in z.files}
    session = ort.InferenceSession(str(pair[0]), providers=["CPUExecutionProvider"])
    assert {i.name: i.shape for i in session.get_inputs()} == {k: list(v.shape) for k, v in feeds.items()}
    session.run(None, feeds)
    again = tmp_path / "again"
    assert _bundle(pair, again, "--no-build") == 0
    assert _tree(again) == _tree(made)
    other = tmp_path / "seed1"
    assert _bundle(pair, other, "--no-build", "--seed", "1") == 0
    assert _tree(other)["inputs.npz"] != _tree(made)["inputs.npz"]


def test_bundle_replaces_its_own_folder_and_refuses_others(pair, tmp_path: Path, capsys) -> None:
    out = tmp_path / "b"
    assert _bundle(pair, out, "--no-build") == 0
    (out / "stale.txt").write_text("x")
    assert _bundle(pair, out, "--no-build") == 0
    assert not (out / "stale.txt").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    assert _bundle(pair, foreign, "--no-build") == 1
    assert "refusing to replace" in _err(capsys) and (foreign / "keep.txt").read_text() == "mine"


def test_bundle_without_sdk_env_writes_commands(pair, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    assert _bundle(pair, tmp_path / "b") == 0
    assert "QNN_SDK_ROOT is not set" in capsys.readouterr().err
    assert not list((tmp_path / "b" / "contexts").glob("*.onnx"))


@pytest.mark.parametrize("case", ["not_fused", "missing", "no_spec", "bad_target", "inside_input"])
def test_bundle_bad_input_is_one_line(case: str, pair, tmp_path: Path, capsys) -> None:
    original, fused = pair
    target, out = "sm8650", tmp_path / "out"
    if case == "not_fused":
        fused = original
    elif case == "missing":
        fused = tmp_path / "nope.onnx"
    elif case == "no_spec":
        fused = tmp_path / "lonely.onnx"
        shutil.copy(pair[1], fused)
    elif case == "bad_target":
        target = "sm0000"
    else:  # ORIGINAL taken from the earlier bundle that -o would replace
        out = tmp_path / "earlier"
        assert _bundle(pair, out, "--no-build") == 0
        original = out / "models" / "original.onnx"
        capsys.readouterr()
    before = fused.read_bytes() if fused.is_file() else None
    kept = original.read_bytes()
    assert hexfuse_main(["bundle", str(original), str(fused), "-o", str(out), "--target", target, "--no-build"]) == 1
    msg = _err(capsys)
    assert {"not_fused": "no fused", "missing": "not found", "no_spec": "no fusion spec",
            "bad_target": "no device target", "inside_input": "would replace the input"}[case] in msg, msg
    if before is not None:
        assert fused.read_bytes() == before
    assert original.read_bytes() == kept


def test_compile_refuses_before_any_session(pair, tmp_path: Path, monkeypatch, capsys) -> None:
    _, fused = pair
    assert hexfuse_main(["compile", str(fused), "-o", str(tmp_path / "x.ctx.onnx")]) == 1
    assert "fused nodes: give the op package" in _err(capsys)
    assert hexfuse_main(["compile", str(tmp_path / "none.onnx"), "-o", str(tmp_path / "x.ctx.onnx")]) == 1
    assert "not found" in _err(capsys)
    pkg = tmp_path / "pkg"
    assert hexfuse_main(["oppkg", str(fused), "-o", str(pkg)]) == 0
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    assert hexfuse_main(["compile", str(fused), "--package", str(pkg), "-o", str(tmp_path / "x.ctx.onnx")]) == 1
    assert "needs QNN_SDK_ROOT" in _err(capsys)
    (pkg / "src" / "ops" / sorted((pkg / "src" / "ops").glob("*.cpp"))[0].name).unlink()
    assert hexfuse_main(["compile", str(fused), "--package", str(pkg), "-o", str(tmp_path / "x.ctx.onnx")]) == 1
    assert "lacks 1 fused op type" in _err(capsys)
    assert not (tmp_path / "x.ctx.onnx").exists()


# --- ab --import on fabricated device results ------------------------------------------------------

def _fabricate(bundle: Path, tamper: str = "") -> Path:
    """A results folder as run_ab.py writes it, with outputs from the CPU EP and synthetic profiles."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    results = bundle / "results"
    if results.exists():
        shutil.rmtree(results)
    (results / "outputs").mkdir(parents=True)
    with np.load(bundle / "inputs.npz") as z:
        feeds = {k: z[k] for k in z.files}
    session = ort.InferenceSession(str(bundle / "models/original.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outs = session.run(names, feeds)
    csv = synthesize_profile(bundle / "models/original.onnx", load_target("sm8650"))
    rng = np.random.default_rng(0)
    runs, latency, profiles = [], {}, {"detailed": {}, "optrace": {}}
    for run in manifest["runs"]:
        if run.get("only_without_package"):
            continue
        key = run["key"]
        got = [o + (1.0 if tamper == "outputs" and key == "b4_fused_concurrent" else 0.0) for o in outs]
        run_script.save_outputs(str(results / "outputs" / f"{key}.npz"), got)
        cpu = "CPUExecutionProvider"
        ep = cpu if tamper == "nothing" and key == "b3_fused_serial" else run_script.QNN_EP
        nodes = [{"ep": ep, "name": "ctx", "op_type": "EPContext", "domain": "com.microsoft", "subgraph": 0}]
        if tamper == "cpu" and key == "b3_fused_serial":
            nodes.append({"ep": cpu, "name": "dq", "op_type": "DequantizeLinear", "domain": "", "subgraph": 1})
        runs.append(dict({k: run[k] for k in ("key", "label", "role", "model", "package")}, source=run["context"],
                         session_seconds=0.01, outputs=f"outputs/{key}.npz", claims=run.get("claims"),
                         serial=run.get("serial"), assignment=nodes))
        latency[key] = list(rng.uniform(1.0, 2.0, 8))
        for level in profiles:
            folder = results / "profiles" / level / key
            folder.mkdir(parents=True)
            (folder / "profile.csv").write_text(csv)
            profiles[level][key] = {"dir": f"profiles/{level}/{key}", "files": ["profile.csv"]}
    data = {"schema": run_script.SCHEMA,
            "bundle": {"manifest_sha256": run_script.sha256(str(bundle / "bundle.json")), "target": manifest["target"],
                       "original_sha256": manifest["original"]["sha256"], "fused_sha256": manifest["fused"]["sha256"]},
            "platform": {"key": "android-aarch64", "system": "Linux", "machine": "aarch64", "python": "3.11",
                         "onnxruntime": "1.24", "onnxruntime_qnn": None, "qnn_ep": "builtin", "simulator": False},
            "form": "context", "provider_options": {"backend_type": "htp"}, "disable_cpu_ep_fallback": True,
            "op_packages": "X:lib.so:HexFuseInterfaceProvider:HTP", "iters": 8, "warmup": 1, "profile_runs": 1,
            "levels": ["detailed", "optrace"], "reference": manifest["reference"], "output_names": names,
            "runs": runs, "unavailable": manifest["unavailable"], "latency_ms": latency, "device_check": {},
            "profiles": profiles}
    (results / "results.json").write_text(json.dumps(data))
    return results


def test_import_reports_like_a_normal_ab_run(made: Path, pair, tmp_path: Path, capsys) -> None:
    results = _fabricate(made)
    report_dir = tmp_path / "report"
    assert hexfuse_main(["ab", "--import", str(results), "-o", str(report_dir)]) == 0
    assert "equivalence PASS" in capsys.readouterr().err
    rep = json.loads((report_dir / "report.json").read_text())
    assert rep["ep"] == "qnn" and rep["simulator"] is False and rep["imported"]["form"] == "context"
    measured = {b["key"] for b in rep["baselines"] if b["available"]}
    assert measured == {"b2_original_best", "b3_fused_serial", "b4_fused_concurrent"}
    assert {"overlap_gain_3_to_4", "fusion_vs_best_existing_2_to_4"} <= set(rep["speedups"])
    assert rep["equivalence"]["passed"] and set(rep["equivalence"]["runs"]) == {"b3_fused_serial", "b4_fused_concurrent"}
    assert rep["cycles"]["per_run"]["b2_original_best"]["accelerator_cycles"] is not None
    assert (report_dir / "qnn_profile_b2_original_best.csv").is_file() and (report_dir / "report.md").is_file()
    assert rep["imported"]["optrace_files"]["b3_fused_serial"] == ["profiles/optrace/b3_fused_serial/profile.csv"]
    # the same results read against the models the bundle was made from
    assert hexfuse_main(["ab", str(pair[0]), str(pair[1]), "--import", str(results), "-o", str(tmp_path / "r2")]) == 0


@pytest.mark.parametrize("tamper, expect", [("outputs", "differs from the original"),
                                            ("cpu", "ran differently from the original"),
                                            ("nothing", "the QNN EP ran no node")])
def test_import_refuses_what_did_not_run_as_asked(tamper: str, expect: str, made: Path, tmp_path: Path,
                                                   capsys) -> None:
    results = _fabricate(made, tamper)
    assert hexfuse_main(["ab", "--import", str(results), "-o", str(tmp_path / "r")]) == 1
    assert expect in _err(capsys)


def test_import_bad_input_is_one_line(made: Path, pair, tmp_path: Path, capsys) -> None:
    assert hexfuse_main(["ab", "--import", str(tmp_path / "none")]) == 1
    assert "not found" in _err(capsys)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "results.json").write_text('{"schema": "other/9"}')
    assert hexfuse_main(["ab", "--import", str(tmp_path / "junk")]) == 1
    assert "schema" in _err(capsys)
    results = _fabricate(made)
    assert hexfuse_main(["ab", str(pair[1]), str(pair[1]), "--import", str(results), "-o", str(tmp_path / "r")]) == 1
    assert "is not the model the bundle" in _err(capsys)
    moved = tmp_path / "moved"
    shutil.copytree(results, moved)
    assert hexfuse_main(["ab", "--import", str(moved), "-o", str(tmp_path / "r")]) == 1
    assert "no bundle.json beside" in _err(capsys)
    assert hexfuse_main(["ab", "--import", str(results), "--op-package", "x.so"]) == 1
    assert "does not apply to --import" in _err(capsys)
    with pytest.raises(SystemExit) as stop:
        hexfuse_main(["ab"])
    assert stop.value.code == 2


def _edit_results(results: Path, edit) -> Path:
    data = json.loads((results / "results.json").read_text())
    edit(data)
    (results / "results.json").write_text(json.dumps(data))
    return results


def _b4(data: dict) -> dict:
    return next(r for r in data["runs"] if r["key"] == "b4_fused_concurrent")


@pytest.mark.parametrize("edit, expect", [
    (lambda d: d.update(output_names=[]), "are not the model's outputs"),
    (lambda d: d["latency_ms"].update(b4_fused_concurrent=[-1.0] * d["iters"]), "not a positive number"),
    (lambda d: d["latency_ms"].update(b4_fused_concurrent=[float("nan")] * d["iters"]), "not a positive number"),
    (lambda d: d["latency_ms"].update(b4_fused_concurrent=[]), "not a positive number"),
    (lambda d: d["latency_ms"].update(b4_fused_concurrent=[1.0] * (d["iters"] - 1)), "latencies (paired)"),
    (lambda d: d["latency_ms"].pop("b4_fused_concurrent"), "not a positive number"),
    (lambda d: d.update(iters=500), "latencies (paired)"),
    (lambda d: d["bundle"].update(original_sha256="0" * 64), "another original model"),
    (lambda d: _b4(d).update(serial=1), "not with the op package at serial=0"),
    (lambda d: d.update(runs=[r for r in d["runs"] if r["key"] != "b3_fused_serial"]), "neither measured nor listed"),
    (lambda d: d.update(reference="b4_fused_concurrent"), "not a run of the original model"),
    (lambda d: d.pop("latency_ms"), "missing or malformed: latency_ms"),
    (lambda d: d["profiles"]["detailed"].update(b4_fused_concurrent={"dir": "profiles/none", "files": []}), "is missing"),
])
def test_import_checks_what_results_json_records(edit, expect: str, made: Path, tmp_path: Path, capsys) -> None:
    """Results that cannot be what run_ab.py measured: refused in one line, before any figure is made."""
    results = _edit_results(_fabricate(made), edit)
    assert hexfuse_main(["ab", "--import", str(results), "-o", str(tmp_path / "r")]) == 1
    assert expect in _err(capsys)
    assert not (tmp_path / "r").exists()


def test_run_script_needs_only_numpy_and_onnxruntime() -> None:
    import ast

    tree = ast.parse(Path(run_script.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    third_party = names - set(__import__("sys").stdlib_module_names)
    assert third_party == {"numpy", "onnxruntime", "onnxruntime_qnn"}, third_party


def test_deterministic_npz_reads_back(tmp_path: Path) -> None:
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b/c": np.array([1, 2], dtype=np.int64)}
    data = bundle_mod.npz_bytes(arrays)
    assert data == bundle_mod.npz_bytes(dict(reversed(list(arrays.items()))))
    (tmp_path / "x.npz").write_bytes(data)
    with np.load(tmp_path / "x.npz") as z:
        assert set(z.files) == set(arrays) and all(np.array_equal(z[k], v) for k, v in arrays.items())


def test_the_device_check_follows_the_workstation_rules() -> None:
    """run_script.compare (numpy only, on the device) judges like tools/ab/compare.py."""
    tol = {"atol": 1e-4, "rtol": 1e-3, "min_cosine": 0.9999}
    special = np.array([np.nan, -np.inf, 1.0], np.float32)
    assert run_script.compare([special], [special.copy()], tol)["passed"]
    assert not run_script.compare([special], [np.array([1.0, -np.inf, np.nan], np.float32)], tol)["passed"]
    assert not run_script.compare([np.array([1500])], [np.array([1501])], tol)["passed"]
    assert run_script.compare([np.zeros(3)], [np.zeros(3) + 1e-9], tol)["passed"]
    assert not run_script.compare([np.array([1.0, 2.0])], [np.array([-1.0, -2.0])], dict(tol, atol=10.0, rtol=10.0))["passed"]
