"""The rooms depend one way: cli -> tools -> op_package -> graph_passes; qnn_configs is data only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# room -> rooms it must never import
FORBIDDEN = {
    "graph_passes": ("hexfuse.op_package", "hexfuse.tools", "hexfuse.cli"),
    "op_package": ("hexfuse.tools", "hexfuse.cli"),
    "tools": ("hexfuse.cli",),
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_rooms_import_only_downward(room: str) -> None:
    bad = [f"{path.relative_to(ROOT)} imports {name}"
           for path in sorted((ROOT / room).rglob("*.py"))
           for name in _imports(path)
           if name.startswith(FORBIDDEN[room]) or name.split(".")[0] in ("graph_passes", "op_package", "tools", "qnn_configs")]
    assert not bad, bad


def test_one_top_level_name_is_installed() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {name.split(".")[0] for name in config["packages"]} == {"hexfuse"}
    assert set(config["package-dir"]) <= set(config["packages"])
