"""The HVX coverage table (op_package/hvx_coverage.py) says what the C sources do: a kernel is listed
exactly when its body reaches a ``hexfuse_hvx_*`` routine (directly or through a helper), and the
table's per-op predicates pick the ops whose path is vectorised."""

from __future__ import annotations

import re
from pathlib import Path

from hexfuse.op_package.hvx_coverage import HVX_PATHS, has_hvx_path, vector_blocker
from hexfuse.op_package.lower.context import kernel

ROOT = Path(__file__).resolve().parents[2]
KERNEL_SOURCES = ROOT / "op_package" / "runtime" / "src" / "kernels"
_DEFINITION = re.compile(r"\n(?:template <[^>]*>\s*)?(?:inline |static )?[A-Za-z_:<>0-9* ]+?\b([a-z_0-9]+)\(([^;{]*?)\)\s*\{")


def _function_bodies() -> dict[str, str]:
    source = "\n".join(path.read_text() for path in sorted(KERNEL_SOURCES.glob("*.cpp")))
    bodies: dict[str, str] = {}
    for match in _DEFINITION.finditer(source):
        depth, end = 1, match.end()
        while depth and end < len(source):
            depth += {"{": 1, "}": -1}.get(source[end], 0)
            end += 1
        bodies[match.group(1)] = bodies.get(match.group(1), "") + source[match.end():end]
    return bodies


def _reaches_hvx(name: str, bodies: dict[str, str], seen: frozenset[str] = frozenset()) -> bool:
    body = bodies.get(name, "")
    if "hexfuse_hvx_" in body:
        return True
    callees = set(re.findall(r"\b([a-z_0-9]+)\s*[<(]", body)) - seen - {name}
    return any(_reaches_hvx(callee, bodies, seen | {name}) for callee in callees if callee in bodies)


def _kernels_the_rules_emit() -> set[str]:
    rules = "\n".join(path.read_text() for path in (ROOT / "op_package" / "lower").glob("*.py"))
    return set(re.findall(r'kernel\(\s*"([a-z_0-9]+)"', rules))


def test_the_table_lists_exactly_the_kernels_whose_source_reaches_hvx() -> None:
    bodies = _function_bodies()
    emitted = _kernels_the_rules_emit()
    assert len(emitted) > 30 and set(HVX_PATHS) <= emitted
    reaching = {fn for fn in emitted if _reaches_hvx(fn, bodies)}
    assert reaching == set(HVX_PATHS)


def test_partial_kernels_take_the_path_for_their_vectorised_ops_only() -> None:
    def unary(op: str):
        return kernel("unary_f32", "UnaryParams", 64, 1.0, op=f"hexfuse::UnaryOp::{op}")

    assert has_hvx_path(unary("kRelu")) and has_hvx_path(unary("kClip"))
    assert not has_hvx_path(unary("kSigmoid"))
    assert not has_hvx_path(kernel("softmax_f32", "SoftmaxParams", 64, 1.0))


def test_a_vector_task_with_a_scalar_kernel_is_refused_with_its_name(case_for) -> None:
    case = case_for(ROOT / "models" / "gptj_block.onnx")  # float: Softmax, Tanh, Pow run scalar
    reasons = [vector_blocker(op) for op in case.spec.fused_ops]
    assert any(r and "needs an HVX path" in r for r in reasons)
