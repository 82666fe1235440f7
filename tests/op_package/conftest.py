"""Session fixtures: each source model is fused, generated, host-built and captured once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.op_package._harness import Case, prepare, source_models

_CASES: dict[str, Case | None] = {}


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oppkg")


@pytest.fixture(scope="session")
def case_for(work_dir: Path):
    def get(model: Path) -> Case | None:
        if model.stem not in _CASES:
            _CASES[model.stem] = prepare(model, work_dir / model.stem)
        return _CASES[model.stem]
    return get


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "source_model" in metafunc.fixturenames:
        models = source_models()
        metafunc.parametrize("source_model", models, ids=[m.stem for m in models])
