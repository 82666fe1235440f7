"""Property: random strings (unicode, quotes, newlines, template and comment delimiters) as tensor,
node and file names go through fuse -> oppkg -> host build. The generated sources contain each name
only escaped (never raw where escaping changes it), only ASCII without control characters, the XML
parses, and the build passes. HEXFUSE_NAME_EXAMPLES raises the example counts (build, render-only)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hexfuse.cli import main
from hexfuse.op_package.render import display
from tests.hardening._support import named_two_branch

EXAMPLES = int(os.environ.get("HEXFUSE_NAME_EXAMPLES", "0"))
FRAGMENTS = ["\n", "\r\n", "\t", '"', "'", "\\", "*/", "/*", "//", "{{", "}}", "{%", "%}", "{#", "<", ">", "&", "--",
             "<!--", "]]>", "$(", "`", "#", "??/", "%", "|", "\x01", "\x7f", "é", "名", "🙂", "\u202e", ";", "\\n"]
PIECE = st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(blacklist_categories=("Cs",)), max_size=6))


def _name(index: int) -> st.SearchStrategy[str]:
    # "hx<i>:" makes each name unique and never part of the template text, so finding the raw name in a
    # generated file can only mean it was printed unescaped.
    return st.lists(PIECE, min_size=1, max_size=5).map(lambda parts: f"hx{index}:" + "".join(parts))


NAMES = st.tuples(*(_name(i) for i in range(9))).map(list)
FILE = st.lists(st.sampled_from([*FRAGMENTS[:-1], "a", "é", " ", "-"]).filter(lambda f: "/" not in f and "\x00" not in f),
                min_size=1, max_size=6).map(lambda parts: "m" + "".join(parts) + ".onnx")


def _rendered(name: str) -> bool:
    return name in ("README.md", "Makefile", ".hexfuse-oppkg") or name.startswith(
        ("config/", "src/ops/", "src/fused/", "src/tasks/")) or name.endswith("Interface.cpp")


def _check(tmp: Path, names: list[str], file_name: str, build: bool) -> None:
    source = tmp / "in.onnx"
    source.write_bytes(named_two_branch(names).SerializeToString())
    fused = tmp / file_name
    assert main(["fuse", str(source), "-o", str(fused), "--min-gain", "0", "--as-designed", "--allow-scalar", *(["--no-verify"] * (not build))]) == 0
    argv = ["oppkg", str(fused), "-o", str(tmp / "pkg")] + (["--build", "host"] if build else [])
    assert main(argv) == 0
    generated = {p.relative_to(tmp / "pkg").as_posix(): p.read_text() for p in (tmp / "pkg").rglob("*")
                 if p.is_file() and "build" not in p.parts}
    hostile = [n for n in (*names, fused.name) if display(n, limit=10**6) != n]
    for path, text in generated.items():
        for name in hostile:
            assert name not in text, (path, name)
        if _rendered(path):
            assert all(ch in "\n\t" or " " <= ch <= "~" for ch in text), path
    ElementTree.parse(next((tmp / "pkg" / "config").glob("*.xml")))
    if build:
        assert next((tmp / "pkg" / "build" / "host").glob("*.so")).stat().st_size > 0


@settings(max_examples=EXAMPLES or 6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=NAMES, file_name=FILE)
def test_random_names_build_and_reach_sources_only_escaped(tmp_path_factory, names, file_name):
    _check(tmp_path_factory.mktemp("names"), names, file_name, build=True)


@settings(max_examples=EXAMPLES * 5 or 40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=NAMES, file_name=FILE)
def test_random_names_reach_sources_only_escaped(tmp_path_factory, names, file_name):
    _check(tmp_path_factory.mktemp("names"), names, file_name, build=False)
