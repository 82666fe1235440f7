"""Class 2, code execution through the spec: a task id with a newline became a C++ statement that ran
when the library was loaded; the output name reached the Makefile (`make host` ran its payload); tensor
names broke the XML OpDef. Every model or spec string now reaches generated code through one of the
renderer's escaping filters, values printed as code are checked (op_package/literals.py), and the spec
reader refuses attributes of the wrong type."""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hexfuse.cli import main
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import load_spec
from hexfuse.op_package import render as render_module
from hexfuse.op_package.literals import check_kernel_literal, check_rule
from hexfuse.op_package.lower import RULES
from hexfuse.op_package.render import cstr, display, render_package
from tests.hardening._support import named_two_branch, one_error, run

# The payloads: a C++ statement after a newline, a Makefile rule, markup and comment enders.
TASK_ID = 't0\nstatic int pwn = std::system("touch PWNED_TASK");\n//'
OUTPUT_NAME = "evil\nhost:\n\ttouch PWNED_MAKE\n#.onnx"
TARGET = 'x"\n\ttouch PWNED_TARGET */ {{ y }} {% z %}'
TENSOR_NAMES = ["x<in>&", "w]]>--", "y\"'\\", "sm*/{{", "two%}\x01", "s$(touch PWNED_S)`", "mm\n//", "soft<!--", "mul\r\n#"]


@pytest.fixture(scope="module")
def hostile_package(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("hostile")
    model = tmp_path / "m.onnx"
    model.write_bytes(named_two_branch(TENSOR_NAMES).SerializeToString())
    fused = tmp_path / OUTPUT_NAME
    assert main(["fuse", str(model), "-o", str(fused), "--min-gain", "0", "--as-designed", "--allow-scalar"]) == 0
    spec_file = fused.with_suffix(".hexfuse.json")
    spec = json.loads(spec_file.read_text())
    spec["fused_ops"][0]["tasks"][0]["id"] = TASK_ID  # the spec is a file anyone can edit
    spec["target"] = TARGET
    spec_file.write_text(json.dumps(spec))
    assert main(["oppkg", str(fused), "-o", str(tmp_path / "pkg"), "--build", "host"]) == 0
    return tmp_path / "pkg"


def _sources(package: Path) -> dict[str, str]:
    return {p.relative_to(package).as_posix(): p.read_text() for p in package.rglob("*")
            if p.is_file() and "build" not in p.parts}


def _rendered(name: str) -> bool:
    """Rendered from templates (the rest is the runtime, copied verbatim)."""
    return name in ("README.md", "Makefile", ".hexfuse-oppkg") or name.startswith(
        ("config/", "src/ops/", "src/fused/", "src/tasks/")) or name.endswith("Interface.cpp")


def test_payloads_reach_generated_files_only_escaped(hostile_package):
    sources = _sources(hostile_package)
    for name, text in sources.items():
        for payload in (TASK_ID, OUTPUT_NAME, TARGET, *TENSOR_NAMES):
            assert payload not in text, (name, payload)
        for line in text.splitlines():
            assert not line.lstrip().startswith(("static int pwn", "touch ")) and line.strip() != "host:", (name, line)
        if _rendered(name):  # ASCII without control characters, whatever the names held
            assert all(ch in "\n\t" or " " <= ch <= "~" for ch in text), name  # tabs: Makefile recipes
    plans = "".join(text for name, text in sources.items() if name.startswith("src/fused/"))
    assert display(TASK_ID) in plans  # in a comment, one line
    assert cstr(TASK_ID) in plans  # the task table's C string holds it exactly, escaped


def test_the_library_loads_without_running_a_payload(hostile_package, monkeypatch):
    monkeypatch.chdir(hostile_package)
    ctypes.CDLL(str(next((hostile_package / "build" / "host").glob("*.so"))))
    assert not list(hostile_package.parent.rglob("PWNED*"))


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_reads_the_makefile_without_running_a_payload(hostile_package):
    proc = subprocess.run(["make", "-n", "host"], cwd=hostile_package, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "PWNED" not in proc.stdout + proc.stderr
    assert not list(hostile_package.parent.rglob("PWNED*"))


def test_tensor_names_cannot_break_the_xml(hostile_package):
    root = ElementTree.parse(next((hostile_package / "config").glob("*.xml"))).getroot()
    labels = [c.text for c in root.iter("Content")][1:]  # the first is the op's description
    assert set(labels) <= {display(name) for name in TENSOR_NAMES}
    assert labels and all(re.fullmatch(r"[A-Za-z0-9 _.:/+=,#()\[\]?-]*", label) for label in labels)


@pytest.mark.parametrize("attribute, value, needle", [
    ("axis", '-1); std::system("touch PWNED"); (', "wrong type for Softmax.axis"),
    ("axis", [-1], "wrong type for Softmax.axis"),
    ("axis", True, "expected a number"),
    ("evil", 1, "Softmax has no attribute 'evil'"),
])
def test_spec_attributes_of_the_wrong_type_are_refused(tmp_path, capsys, attribute, value, needle):
    model = tmp_path / "m.onnx"
    model.write_bytes(named_two_branch(["x", "w", "y", "sm", "two", "s", "a", "b", "c"]).SerializeToString())
    assert run(capsys, "fuse", model, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")[0] == 0
    spec_file = tmp_path / "f.hexfuse.json"
    spec = json.loads(spec_file.read_text())
    node = next(n for t in spec["fused_ops"][0]["tasks"] for n in t["nodes"] if n["op_type"] == "Softmax")
    node["attributes"][attribute] = value
    spec_file.write_text(json.dumps(spec))
    code, err = run(capsys, "oppkg", tmp_path / "f.onnx", "-o", tmp_path / "pkg")
    assert code == 1 and needle in one_error(err)
    assert not (tmp_path / "pkg").exists()


def test_a_lowering_rule_printing_raw_text_is_refused(tmp_path, capsys, monkeypatch):
    """Defense in depth: should a lowering rule ever print a model string as code, the renderer refuses."""
    model = tmp_path / "m.onnx"
    model.write_bytes(named_two_branch(["x", "w", "y", "sm", "two", "s", "a", "b", "c"]).SerializeToString())
    assert run(capsys, "fuse", model, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")[0] == 0
    spec = load_spec(str(tmp_path / "f.hexfuse.json"))
    original = RULES["Softmax"]

    def leaky(ctx):
        kernel = original(ctx)
        return kernel.__class__(kernel.fn, kernel.params_type, (*kernel.fields, ("axis", 'x; std::system("y")')),
                                kernel.units, kernel.unit_cost, kernel.max_tiles)

    monkeypatch.setitem(RULES, "Softmax", leaky)
    with pytest.raises(HexfuseError, match="is not a C\\+\\+ literal"):
        render_package(spec)


@pytest.mark.parametrize("value", ["1", "-7LL", "1e-05f", "-HUGE_VALF", "{{1, 2, 0}}", "hexfuse::PadMode::kReflect"])
def test_kernel_literals_we_emit_pass(value):
    check_kernel_literal("field", value, "here")


@pytest.mark.parametrize("value", ['"a"', "1; f()", "f(1)", "1 // c", "1\n2", "a/*b*/", "#define X"])
def test_kernel_literals_that_are_code_are_refused(value):
    with pytest.raises(HexfuseError):
        check_kernel_literal("field", value, "here")


@pytest.mark.parametrize("text", ['Op("x"); system("y")', 'Op("a\\"b")', "Op(x) // c", "Op(x)\nOp(y)", "Op({1})"])
def test_rules_outside_the_grammar_are_refused(text):
    with pytest.raises(HexfuseError):
        check_rule(text, "here")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_display_is_one_safe_line_without_trigraphs(text):
    shown = display(text)
    assert "\n" not in shown and "??" not in shown and "*/" not in shown
    assert re.fullmatch(r"[A-Za-z0-9 _.:/+=,#()\[\]?-]*", shown)
    literal = cstr(text)
    assert literal.startswith('"') and literal.endswith('"') and '"' not in literal[1:-1]
    assert all(" " <= ch <= "~" for ch in literal) and "??" not in literal
    assert render_module.display is display  # templates use this very filter
