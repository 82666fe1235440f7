"""Class 7, tracebacks instead of one line: `oppkg` into a read-only folder, spec fields of the wrong
type, an int64-max input dimension during verification, sequence- or optional-typed graph inputs,
bad `ab` arguments. Every hostile input below ends in exactly one `hexfuse: error:` line with exit 1,
a message of its own (never the CLI's last-resort "internal error") and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import builders
from tests.hardening._support import named_two_branch, one_error, run

NAMES = ["x", "w", "y", "sm", "two", "s", "mm", "softmax", "mul"]


@pytest.fixture(scope="module")
def fused(tmp_path_factory) -> Path:
    from hexfuse.cli import main

    folder = tmp_path_factory.mktemp("fused")
    (folder / "m.onnx").write_bytes(named_two_branch(NAMES).SerializeToString())
    assert main(["fuse", str(folder / "m.onnx"), "-o", str(folder / "f.onnx"), "--min-gain", "0", "--as-designed", "--allow-scalar"]) == 0
    return folder / "f.onnx"


def _spec_case(fused: Path, tmp_path: Path, edit) -> Path:
    """A copy of the fused model whose spec ``edit`` changed (a dict edit, or a str/bytes replacement)."""
    model = tmp_path / "f.onnx"
    model.write_bytes(fused.read_bytes())
    raw = json.loads(fused.with_suffix(".hexfuse.json").read_text())
    result = edit(raw)
    spec = model.with_suffix(".hexfuse.json")
    if isinstance(result, bytes):
        spec.write_bytes(result)
    else:
        spec.write_text(result if isinstance(result, str) else json.dumps(raw))
    return model


def _op(raw):
    return raw["fused_ops"][0]


def _node(raw, op_type="Softmax"):
    return next(n for t in _op(raw)["tasks"] for n in t["nodes"] if n["op_type"] == op_type)


SPEC_EDITS = {
    "shape of strings": (lambda r: _op(r)["inputs"][0].update(shape=["16", "16"]), "expected an integer"),
    "shape of booleans": (lambda r: _op(r)["inputs"][0].update(shape=[True, 16]), "expected an integer"),
    "negative dimension": (lambda r: _op(r)["tensors"][0].update(shape=[-1, 16]), "outside"),
    "dimension past int64": (lambda r: _op(r)["tensors"][0].update(shape=[2**64, 16]), "outside"),
    "unknown engine": (lambda r: _op(r)["tasks"][0].update(engine="gpu"), "is not one of matrix"),
    "op type with a space": (lambda r: _op(r).update(op_type="Hex Fuse"), "is not a C identifier"),
    "fused ops as an object": (lambda r: r.update(fused_ops={}), "expected a list"),
    "task as a string": (lambda r: _op(r).update(tasks=["t0"]), "expected an object"),
    "missing tensors": (lambda r: _op(r).pop("tensors"), "tensors: missing"),
    "NaN scale": (lambda r: _op(r)["inputs"][0].update(quant={"dtype": "uint8", "scale": [float("nan")],
                                                               "zero_point": [0]}), "finite number"),
    "string attribute for an int": (lambda r: _node(r)["attributes"].update(axis="-1"), "wrong type for Softmax.axis"),
    "list attribute of objects": (lambda r: _node(r)["attributes"].update(axis=[{}]), "a list of one of them"),
    "two op types of one name": (lambda r: r["fused_ops"].append(r["fused_ops"][0]), "appears twice"),
    "schema version as a string": (lambda r: r.update(schema_version="4"), "schema_version '4' is not supported"),
    "schema version true": (lambda r: r.update(schema_version=True), "schema_version True is not supported"),
    "model hash not hex": (lambda r: r.update(model_sha256="zz"), "not a sha256"),
    "not JSON": (lambda r: "{fused_ops: [", "not valid JSON"),
    "a JSON list": (lambda r: "[1, 2]", "schema_version None"),
    "nested a million deep": (lambda r: "[" * 10**6, "not valid JSON"),
    "not UTF-8": (lambda r: b"\xff\xfe{}", "not UTF-8"),
}


@pytest.mark.parametrize("case", list(SPEC_EDITS))
def test_hostile_specs_are_one_line(fused, tmp_path, capsys, case):
    edit, needle = SPEC_EDITS[case]
    model = _spec_case(fused, tmp_path, edit)
    code, err = run(capsys, "oppkg", model, "-o", tmp_path / "pkg")
    assert code == 1 and needle in one_error(err)
    assert not (tmp_path / "pkg").exists()


def _cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    model = tmp / "m.onnx"
    model.write_bytes(builders.two_branch(16).SerializeToString())
    seq = tmp / "seq.onnx"
    seq_model = builders.two_branch(16)
    from onnx import TensorProto, helper

    seq_model.graph.input.append(helper.make_tensor_sequence_value_info("q", TensorProto.FLOAT, [4]))
    seq_model.graph.node.append(helper.make_node("SequenceLength", ["q"], ["n"], name="len"))
    seq_model.graph.output.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    seq.write_bytes(seq_model.SerializeToString())
    huge = tmp / "huge.onnx"
    huge_model = builders.two_branch(16)
    huge_model.graph.input.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2**63 - 1]))
    huge_model.graph.node.append(helper.make_node("Relu", ["z"], ["rz"], name="rz"))
    huge_model.graph.output.append(helper.make_tensor_value_info("rz", TensorProto.FLOAT, [2**63 - 1]))
    huge.write_bytes(huge_model.SerializeToString())
    (tmp / "junk.onnx").write_bytes(b"\x08\x07" + bytes(range(256)))
    return {
        "fuse into /proc": (["fuse", str(model), "-o", "/proc/hexfuse/f.onnx"], "cannot create output directory"),
        "oppkg into /proc": (["oppkg", str(tmp / "f.onnx"), "-o", "/proc/hexfuse_pkg"], "cannot"),
        "fuse, int64-max input dimension": (["fuse", str(huge), "-o", str(tmp / "o1.onnx"), "--min-gain", "0", "--as-designed", "--allow-scalar"],
                                            "verification cannot generate input 'z'"),
        "fuse, sequence input": (["fuse", str(seq), "-o", str(tmp / "o2.onnx"), "--min-gain", "0", "--as-designed", "--allow-scalar"], "its type is sequence"),
        "analyze junk": (["analyze", str(tmp / "junk.onnx")], "not an ONNX model"),
        "merge junk": (["merge", str(model), str(tmp / "junk.onnx"), "-o", str(tmp / "mm.onnx")], "not an ONNX model"),
        "ab, negative seed": (["ab", str(model), str(tmp / "f.onnx"), "--seed", "-1"], "--seed must be in"),
        "ab, 1e23 iterations": (["ab", str(model), str(tmp / "f.onnx"), "--iters", str(10**23)], "--iters must be in"),
        "ab, negative tolerance": (["ab", str(model), str(tmp / "f.onnx"), "--rtol", "-1"], "--rtol must be"),
        "ab, report dir is a file": (["ab", str(model), str(tmp / "f.onnx"), "-o", str(model)], "not a directory"),
        "ab, sequence input": (["ab", str(seq), str(tmp / "o2n.onnx"), "--no-cpu-package"], "is not a tensor"),
        "ab, int64-max input": (["ab", str(huge), str(tmp / "o1n.onnx"), "--no-cpu-package"], "too large for seeded"),
    }


def test_hostile_invocations_are_one_line(tmp_path, capsys):
    cases = _cases(tmp_path)
    assert run(capsys, "fuse", tmp_path / "m.onnx", "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")[0] == 0
    for stem in ("seq", "huge"):
        assert run(capsys, "fuse", tmp_path / f"{stem}.onnx", "-o", tmp_path / f"o{1 if stem == 'huge' else 2}n.onnx",
                   "--min-gain", "0", "--as-designed", "--allow-scalar", "--no-verify")[0] == 0
    for name, (argv, needle) in cases.items():
        code, err = run(capsys, *argv)
        assert code == 1 and needle in one_error(err), (name, err)


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                        st.text(max_size=12), st.lists(st.integers(-5, 5), max_size=3),
                        st.lists(st.text(max_size=3), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    yield path


@settings(max_examples=int(__import__("os").environ.get("HEXFUSE_SPEC_FUZZ", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=st.data())
def test_any_spec_mutation_is_a_package_or_one_line(fused, tmp_path_factory, data):
    """Replace one random field of a real spec by a random JSON value: oppkg generates a package or
    refuses in one line; it never raises anything else."""
    from hexfuse.cli import main

    tmp = tmp_path_factory.mktemp("mutant")
    raw = json.loads(fused.with_suffix(".hexfuse.json").read_text())
    paths = [p for p in _leaves(raw) if p]
    path = data.draw(st.sampled_from(paths))
    value = data.draw(JSON_LEAVES)
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    model = _spec_case(fused, tmp, lambda r: json.dumps(raw))
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["oppkg", str(model), "-o", str(tmp / "pkg")])
    if code:
        assert code == 1 and one_error(err.getvalue())
        assert not (tmp / "pkg").exists()
    else:
        assert (tmp / "pkg" / ".hexfuse-oppkg").is_file()


def _hostile_models() -> dict[str, object]:
    from onnx import TensorProto, helper

    def edit(change):
        model = builders.two_branch(16)
        change(model)
        return model

    return {
        "attribute of the wrong type": edit(lambda m: m.graph.node[1].attribute[0].CopyFrom(helper.make_attribute("axis", "x"))),
        "IR version 99": edit(lambda m: setattr(m, "ir_version", 99)),
        "negative opset": edit(lambda m: setattr(m.opset_import[0], "version", -1)),
        "no outputs": edit(lambda m: m.graph.ClearField("output")),
        "string input": edit(lambda m: setattr(m.graph.input[0].type.tensor_type, "elem_type", TensorProto.STRING)),
        "initializer shorter than its dims": edit(lambda m: setattr(m.graph.initializer[0], "raw_data", b"abc")),
        "a fused node without its function": edit(lambda m: (setattr(m.graph.node[0], "domain", "hexfuse"),
                                                              m.opset_import.append(helper.make_opsetid("hexfuse", 1)))),
        "external data outside the folder": edit(lambda m: (
            m.graph.initializer[0].ClearField("raw_data"), setattr(m.graph.initializer[0], "data_location", 1),
            m.graph.initializer[0].external_data.add(key="location", value="../../etc/passwd"))),
        "request metadata of the wrong shape": edit(lambda m: m.metadata_props.add(key="hexfuse.requests", value='[["a", 1]]')),
        "micro-batch metadata of the wrong type": edit(lambda m: m.metadata_props.add(key="hexfuse.micro_batches",
                                                                                      value='{"count": "2"}')),
    }


@pytest.mark.parametrize("case", list(_hostile_models()))
def test_hostile_models_are_analysed_or_refused_in_one_line(tmp_path, capsys, case):
    model = tmp_path / "m.onnx"
    model.write_bytes(_hostile_models()[case].SerializeToString())
    for argv in (["analyze", model], ["fuse", model, "-o", tmp_path / "o" / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar"]):
        code, err = run(capsys, *argv)
        assert code in (0, 1) and "Traceback" not in err, err
        if code:
            one_error(err)
