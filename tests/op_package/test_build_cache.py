"""The host build's object cache: each distinct object compiles once, and the precompiled prelude of the
generated plans changes how fast they compile, never what they compile to."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from hexfuse.graph_passes.spec.model import load_spec
from hexfuse.op_package import build
from hexfuse.op_package.render import render_package
from hexfuse.op_package.writer import write_tree

GOLDEN = Path(__file__).resolve().parent / "data" / "golden.hexfuse.json"


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write_tree(render_package(load_spec(str(GOLDEN))), tmp_path / "pkg")


def _plans(root: Path) -> list[Path]:
    return [src for src in build.portable_sources(root) if src.parent.name in build.PLAN_DIRS]


def _count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = build.run_tool

    def counted(cmd: list[str], cwd: Path) -> None:
        calls.append(cmd)
        real(cmd, cwd)

    monkeypatch.setattr(build, "run_tool", counted)
    return calls


def test_plans_compiled_with_the_prelude_header_are_byte_identical(package: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if not build._is_gcc(build.compiler()):
        pytest.skip("the precompiled prelude is built for GCC only")
    plans = _plans(package)
    monkeypatch.setattr(build, "MIN_PCH_SOURCES", 1)  # the golden package has two plans and the registry
    monkeypatch.setenv("HEXFUSE_CACHE", str(tmp_path / "with"))
    calls = _count_compiles(monkeypatch)
    with_pch = build.compile_objects(package, plans)
    assert any("c++-header" in cmd for cmd in calls)
    users = [cmd for cmd in calls if "-include" in cmd]
    assert len(users) == len(plans) - 1  # every plan but the registry, which opens with other includes
    monkeypatch.setattr(build, "MIN_PCH_SOURCES", 10**9)
    monkeypatch.setenv("HEXFUSE_CACHE", str(tmp_path / "without"))
    calls.clear()
    plain = build.compile_objects(package, plans)
    assert not any("-include" in cmd or "c++-header" in cmd for cmd in calls)
    for a, b in zip(with_pch, plain):
        assert a.name == b.name and filecmp.cmp(a, b, shallow=False), f"{a} differs from {b}"


def test_each_distinct_object_compiles_once(package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the session's cache (objects other tests built are reused: at most one compile per source)."""
    calls = _count_compiles(monkeypatch)
    build.build_host(package)
    compiled = [cmd[cmd.index("-c") + 1] for cmd in calls if "-c" in cmd]
    assert len(compiled) == len(set(compiled)) <= len(build.portable_sources(package))
    if build._is_gcc(build.compiler()):  # the plans skip the two passes that only slowed their tables; kernels keep them
        for cmd in calls:
            if "-c" in cmd:
                plan = Path(cmd[cmd.index("-c") + 1]).parent.name in build.PLAN_DIRS
                assert all(flag in cmd for flag in build.PLAN_FLAGS) == plan, cmd
    again = write_tree(render_package(load_spec(str(GOLDEN))), tmp_path / "again")  # same spec, another folder
    calls.clear()
    library = build.build_host(again)
    assert [cmd for cmd in calls if "-c" in cmd] == [] and library.is_file()  # only the link ran
