"""Generation: deterministic, golden files, warning-free host build, clear refusals, CLI contract."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusionSpec, load_spec
from hexfuse.op_package import cli
from tests.op_package._harness import LIGHT, NEGATIVE_MODELS
from hexfuse.op_package.render import op_packages_option, render_package

DATA = Path(__file__).parent / "data"
GOLDEN_SPEC = DATA / "golden.hexfuse.json"
GOLDEN_FILES = ("src/fused/HexFuse_0_golden.cpp", "src/ops/HexFuse_0_golden.cpp", "config/HexFuse.xml", "README.md")


def golden_spec() -> FusionSpec:
    return load_spec(str(GOLDEN_SPEC))


def test_generation_is_deterministic() -> None:
    assert render_package(golden_spec()) == render_package(golden_spec())


def test_generation_is_deterministic_on_a_real_model(source_model: Path, case_for) -> None:
    case = case_for(source_model)
    if case is None:
        assert source_model.name in NEGATIVE_MODELS, f"the graph pass fused nothing in {source_model.name}"
        return
    first, second = render_package(case.spec), render_package(load_spec(str(case.fused.with_suffix(".hexfuse.json"))))
    assert first == second


@pytest.mark.parametrize("rel", GOLDEN_FILES)
def test_golden(rel: str) -> None:
    rendered = render_package(golden_spec())[rel]
    expected = DATA / "golden" / rel
    if os.environ.get("HEXFUSE_UPDATE_GOLDEN"):
        expected.parent.mkdir(parents=True, exist_ok=True)
        expected.write_text(rendered)
    assert rendered == expected.read_text(), f"{rel} changed; rerun with HEXFUSE_UPDATE_GOLDEN=1 if intended"


def test_op_packages_string() -> None:
    files = render_package(golden_spec(), "HexFuse")
    option = op_packages_option("HexFuse", ["HexFuse_0_golden"], "libQnnHexFuse.so")
    assert option == "HexFuse_0_golden:libQnnHexFuse.so:HexFuseInterfaceProvider:CPU"
    assert option in files["README.md"]
    assert "HexFuseInterfaceProvider" in files["src/HexFuseInterface.cpp"]


def _with_node(spec: FusionSpec, **changes) -> FusionSpec:
    op = spec.fused_ops[0]
    task = op.tasks[1]
    node = dataclasses.replace(task.nodes[0], **changes)
    tasks = (op.tasks[0], dataclasses.replace(task, nodes=(node, *task.nodes[1:])))
    return dataclasses.replace(spec, fused_ops=(dataclasses.replace(op, tasks=tasks),))


def _with_tensor(spec: FusionSpec, name: str, **changes) -> FusionSpec:
    op = spec.fused_ops[0]
    fix = lambda ts: tuple(dataclasses.replace(t, **changes) if t.name == name else t for t in ts)  # noqa: E731
    op = dataclasses.replace(op, inputs=fix(op.inputs), outputs=fix(op.outputs), tensors=fix(op.tensors))
    return dataclasses.replace(spec, fused_ops=(op,))


@pytest.mark.parametrize("spec_change, message", [
    (lambda s: _with_node(s, op_type="NonMaxSuppression"), "node 'act' (NonMaxSuppression): op NonMaxSuppression is not supported"),
    (lambda s: _with_node(s, domain="com.microsoft"), "node 'act' (Relu): domain 'com.microsoft'"),
    (lambda s: _with_tensor(s, "h", dtype="float16"), "node 'act' (Relu): tensor 'h' has unsupported dtype float16"),
    (lambda s: _with_tensor(s, "h", dtype="int32"), "node 'act' (Relu): tensor 'h' has dtype int32, supported: float32"),
    (lambda s: _with_tensor(s, "h", shape=(2, 0)), "node 'act' (Relu): tensor 'h' has a dynamic or empty shape"),
    (lambda s: _with_tensor(s, "h", shape=(-1, 4)), "node 'act' (Relu): tensor 'h' has a dynamic or empty shape"),
    (lambda s: _with_node(s, inputs=("ghost",)), "node 'act' (Relu): input 'ghost' is neither a fused-op input"),
])
def test_bad_spec_is_refused_naming_the_node(spec_change, message: str) -> None:
    with pytest.raises(HexfuseError) as err:
        render_package(spec_change(golden_spec()))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_package_name_is_refused() -> None:
    with pytest.raises(HexfuseError, match="C identifier"):
        render_package(golden_spec(), "Hex-Fuse")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["oppkg", *argv])


def test_cli_generates_and_builds_host(case_for, tmp_path: Path) -> None:
    case = case_for(LIGHT / "light_squeezenet.onnx")
    args = _parse([str(case.fused), "-o", str(tmp_path / "pkg"), "--build", "host"])
    assert args.func(args) == 0
    assert (tmp_path / "pkg" / "build" / "host" / "libHexFuseHost.so").exists()
    assert (tmp_path / "pkg" / "config" / "HexFuse.xml").exists()


def test_cli_package_folder_has_the_mode_mkdir_gives(case_for, tmp_path: Path) -> None:
    """The tree is staged in a temporary folder and renamed: it must not keep mkdtemp's 0700."""
    import os

    case = case_for(LIGHT / "light_squeezenet.onnx")
    args = _parse([str(case.fused), "-o", str(tmp_path / "pkg")])
    assert args.func(args) == 0
    (tmp_path / "made").mkdir()
    assert os.stat(tmp_path / "pkg").st_mode == os.stat(tmp_path / "made").st_mode


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cli_failed_build_leaves_the_previous_package(case_for, tmp_path: Path, monkeypatch) -> None:
    """The build runs in the staged tree before the swap: a failed one leaves DIR exactly as it was
    (p07: a non-SDK QNN_SDK_ROOT replaced DIR, then failed in make). Needs no SDK, make or compiler."""
    from hexfuse.op_package import build

    case = case_for(LIGHT / "light_squeezenet.onnx")
    out = tmp_path / "pkg"
    args = _parse([str(case.fused), "-o", str(out)])
    assert args.func(args) == 0
    earlier = out / "build" / "host" / "libHexFuseHost.so"  # stands for an earlier build in DIR
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"earlier build")
    before = _tree(out)

    def failing_build(package_dir: Path) -> Path:
        (Path(package_dir) / "build").mkdir(exist_ok=True)  # a half-done build, then make fails
        raise HexfuseError(f"htp_x86 build failed in {package_dir}: no QnnOpPackage.h")

    monkeypatch.setattr(build, "check_htp_x86_tools", lambda: None)
    monkeypatch.setattr(build, "build_htp_x86", failing_build)
    args = _parse([str(case.fused), "-o", str(out), "--build", "htp_x86"])
    with pytest.raises(HexfuseError, match="left as it was") as err:
        args.func(args)
    assert f"build failed in {out.resolve()}:" in str(err.value)  # DIR named, not the removed staged tree
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["pkg"]  # no staged tree left beside DIR


def test_cli_refuses_a_spec_that_does_not_match_the_model(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    (tmp_path / "m.hexfuse.json").write_text(GOLDEN_SPEC.read_text())
    with pytest.raises(HexfuseError, match="no fused node .* of op type HexFuse_0_golden"):
        cli.run(_parse([str(path), "-o", str(tmp_path / "out")]))
    onnx.save(model, str(tmp_path / "bare.onnx"))
    with pytest.raises(HexfuseError, match="no fusion spec"):
        cli.run(_parse([str(tmp_path / "bare.onnx"), "-o", str(tmp_path / "o")]))


def test_cli_checks_every_instance_of_a_shared_op_type(case_for, tmp_path: Path) -> None:
    import onnx

    case = case_for(LIGHT / "light_squeezenet.onnx")
    spec = load_spec(str(case.fused.with_suffix(".hexfuse.json")))
    op = spec.fused_ops[0]
    model = onnx.load(str(case.fused))
    fused = [n for n in model.graph.node if n.domain == spec.domain]
    assert {n.name for n in fused} == {name for o in spec.fused_ops for name in o.instances}
    for node in fused:  # a stray fused node the spec does not list
        if node.name == op.instances[0]:
            node.name = "renamed_by_hand"
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    # the hand-edited model has another hash: each spec below names it, so the node check speaks
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    spec = dataclasses.replace(spec, model_sha256=digest)
    path.with_suffix(".hexfuse.json").write_text(spec.to_json())
    with pytest.raises(HexfuseError, match=f"no fused node '{op.instances[0]}'"):
        cli.run(_parse([str(path), "-o", str(tmp_path / "out")]))
    renamed = ("renamed_by_hand", *op.instances[1:])
    fixed = dataclasses.replace(spec, fused_ops=(dataclasses.replace(op, instances=renamed), *spec.fused_ops[1:]))
    path.with_suffix(".hexfuse.json").write_text(fixed.to_json())
    assert cli.run(_parse([str(path), "-o", str(tmp_path / "out")])) == 0  # every fused node described again
    if len(renamed) > 1:  # a spec listing fewer instances than the model holds
        fewer = dataclasses.replace(spec, fused_ops=(dataclasses.replace(op, instances=renamed[:1]), *spec.fused_ops[1:]))
        path.with_suffix(".hexfuse.json").write_text(fewer.to_json())
        with pytest.raises(HexfuseError, match="that its spec does not describe"):
            cli.run(_parse([str(path), "-o", str(tmp_path / "out2")]))
