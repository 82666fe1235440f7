"""Render a fusion spec into the op package source tree: a pure function spec -> {relative path: text}.

    DIR/
      README.md                     how to build, the exact op_packages provider string
      Makefile                      host | htp_x86 | htp_v73 | htp_v75 | htp_v79 | htp_aarch64 (SDK conventions)
      config/<Pkg>.xml              qnn-op-package-generator OpDef config
      include/hexfuse/...           executor, ports and kernel headers (copied from op_package/runtime)
      src/<Pkg>Interface.cpp        QNN op package interface (SDK glue)
      src/ops/<OpType>.cpp          SDK glue per fused op: its HTP expansion (rules, task ops, htp_expand.py)
      src/htp/tensor_bridge.*       HTP tensors -> ports (SDK glue, shared by every op)
      src/fused/<OpType>.cpp        the whole op's plan: kernel params + micro-op tables (host builds)
      src/tasks/<OpType>__t<k>.cpp  one plan per non-matrix task: the task ops HTP runs on HVX threads
      src/fused/registry.cpp        plan table (host ABI index: spec order, then the task ops)
      src/runtime, src/kernels      executor, ports and kernel library (copied; kernels/matrix: host only)
      src/host/host_api.cpp         C ABI of the host build (copied)

Templates hold layout only; every value is computed here or in plan.py. Generated code is a trust
boundary: C++ identifiers come from us (validated op types, the package name), and every string
taken from the model passes through exactly one of the escaping filters below before a template
prints it (``display`` for comments, XML text and Markdown; ``cstr`` for C string literals).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, TensorSpec
from hexfuse.op_package.htp_expand import Expansion, expand_fused_op
from hexfuse.op_package.literals import check_kernel_literal, check_rule
from hexfuse.op_package.lower.context import CPP_DTYPE
from hexfuse.op_package.plan import OpPlan, plan_fused_op
from hexfuse.op_package.writer import DEFAULT_PACKAGE, MARKER

HERE = Path(__file__).parent
RUNTIME = HERE / "runtime"
TEMPLATES = HERE / "templates"
PACKAGE_VERSION = "1.0.0"

# QNN datatype of a port as the QNN EP presents it (DESIGN.md section 4): a port with a wire encoding
# carries the boundary DQ/Q's quantization; int64 arrives as int32; integers without one stay plain.
WIRE_QNN_DTYPES = {"uint8": "QNN_DATATYPE_UFIXED_POINT_8", "int8": "QNN_DATATYPE_SFIXED_POINT_8",
                   "uint16": "QNN_DATATYPE_UFIXED_POINT_16", "int16": "QNN_DATATYPE_SFIXED_POINT_16",
                   "int32": "QNN_DATATYPE_SFIXED_POINT_32"}
PLAIN_QNN_DTYPES = {"float32": "QNN_DATATYPE_FLOAT_32", "int32": "QNN_DATATYPE_INT_32", "int64": "QNN_DATATYPE_INT_32",
                    "uint8": "QNN_DATATYPE_UINT_8", "int8": "QNN_DATATYPE_INT_8", "uint16": "QNN_DATATYPE_UINT_16",
                    "int16": "QNN_DATATYPE_INT_16", "bool": "QNN_DATATYPE_BOOL_8"}

_DISPLAY_SAFE = re.compile(r"[^A-Za-z0-9 _.:/+=,#()\[\]-]+")  # a run of others becomes one '?' (no "??" trigraph)
_C_SAFE = re.compile(r"[A-Za-z0-9 _.:/+=,#()\[\]-]")


def display(text: object, limit: int = 80) -> str:
    """A model-derived string for comments, XML text and Markdown: a fixed safe alphabet, one line.

    Nothing that can end a comment, open markup or an escape survives (no newline, backslash, quote,
    '<', '&', '*', '$', '`', '|', '{', '%'); each run of anything else reads as one '?', so no
    trigraph ("??/" would be a backslash to some compilers, a -Wtrigraphs error to others) can form."""
    text = _DISPLAY_SAFE.sub("?", str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cstr(text: object) -> str:
    """A C/C++ string literal holding exactly ``text`` (UTF-8), every unsafe byte as an octal escape."""
    out = []
    for byte in str(text).encode("utf-8"):
        char = chr(byte)
        out.append(char if byte < 128 and _C_SAFE.fullmatch(char) else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def c_identifier(name: str, what: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise HexfuseError(f"{what} {display(name)!r} is not a C identifier")
    return name


@dataclass(frozen=True)
class PortView:
    """One input/output of a fused op as the SDK glue and the XML see it."""
    index: int
    label: str  # display-safe tensor name
    qnn_dtype: str
    shape: tuple[int, ...]
    static: bool


def _port(index: int, tensor: TensorSpec) -> PortView:
    if tensor.wire is not None:
        if tensor.wire.dtype not in WIRE_QNN_DTYPES:
            raise HexfuseError(f"fused op port {display(tensor.name)!r}: quantized type {tensor.wire.dtype} has no QNN datatype")
        qnn = WIRE_QNN_DTYPES[tensor.wire.dtype]
    elif tensor.dtype in PLAIN_QNN_DTYPES:
        qnn = PLAIN_QNN_DTYPES[tensor.dtype]
    else:
        raise HexfuseError(f"fused op port {display(tensor.name)!r}: dtype {tensor.dtype} has no QNN datatype in the op package")
    return PortView(index, display(tensor.name), qnn, tuple(tensor.shape), tensor.static)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["cstr"] = cstr
    env.filters["display"] = display
    env.filters["prod"] = lambda shape: max(1, math.prod(shape))
    env.filters["cpp_dtype"] = lambda dtype: CPP_DTYPE[dtype]
    env.filters["port_quant"] = port_quant
    return env


def check_package_name(name: str) -> str:
    # DESIGN.md 4: the package name is the interface symbol prefix, so it must be a C identifier.
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise HexfuseError(f"package name {display(name)!r} must be a C identifier (it prefixes <Pkg>InterfaceProvider)")
    return name


def runtime_files() -> dict[str, str]:
    files = {}
    for path in sorted(RUNTIME.rglob("*")):
        if path.is_file() and path.suffix in (".h", ".cpp"):
            files[path.relative_to(RUNTIME).as_posix()] = path.read_text(encoding="utf-8")
    return files


OPTION_LIMIT = 8192  # ONNX Runtime refuses longer session config values ("Config value is longer than ...")


def op_packages_option(package: str, op_types: list[str], library: str, target: str = "CPU",
                       check: bool = True) -> str:
    """The QNN EP provider option: one entry per op type (the EP matches packages by op type only);
    target CPU for the x86 simulator build, HTP for a device build. ``check`` refuses an option ONNX
    Runtime would refuse (the generated README only shows it)."""
    option = ",".join(f"{op}:{library}:{package}InterfaceProvider:{target}" for op in op_types)
    if check and len(option) > OPTION_LIMIT:
        raise HexfuseError(
            f"the op_packages option for {len(op_types)} fused op types is {len(option)} characters, over ONNX "
            f"Runtime's limit of {OPTION_LIMIT}: put the library at a shorter path (it is repeated per op type) "
            "or fuse fewer distinct op types")
    return option


def port_quant(tensor: TensorSpec) -> str:
    """hexfuse::PortQuant of a port: its encoding where the plan reads it as codes (lower/qdq_ports.py)."""
    quant = tensor.quant
    if quant is None or tensor.dtype == "float32" or len(quant.scale) != 1:
        return "{0, 1.0f, 0}"
    return f"{{1, {float(quant.scale[0])!r}f, {int(quant.zero_point[0])}}}"


def library_name(package: str) -> str:
    return f"libQnn{package}.so"


@dataclass(frozen=True)
class RuleView:
    """One DEF_PACKAGE_OPTIMIZATION: expands one output of a fused op for one value of `serial`."""
    match: str
    constraint: str
    replacement: str


def _rules(plan: OpPlan, expansion: Expansion) -> list[RuleView]:
    tags = ", ".join(f'"in_{i}"' for i in range(len(plan.inputs)))
    op = f'Op("{plan.symbol}", {tags}, "serial")'
    multi = len(plan.outputs) > 1
    views = []
    for rule in expansion.rules:
        serial = f'EQ(CONSTVAL_INT("serial", 0), {int(rule.serial)})'
        if multi:
            views.append(RuleView(f'Op("$Out", {op}, "sel")', f'AND(EQ(DIM_OF("sel", 3), {rule.output}), {serial})',
                                  rule.replacement))
        else:
            views.append(RuleView(op, serial, rule.replacement))
    return views


def _guarded(step, op: FusedOp):
    """A lowering step on a spec that passed spec_read but holds values no rule expected (a zero
    stride, an axis past the rank): one error line naming the op, never a traceback."""
    try:
        return step(op)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, StopIteration, ArithmeticError) as exc:
        raise HexfuseError(f"fused op {display(op.op_type)}: cannot generate code for it "
                           f"({type(exc).__name__}: {display(exc, 120)})") from None


def _check_code(plans: list[OpPlan], expansions: list[Expansion]) -> None:
    """Values printed as code, not through an escaping filter, are checked (literals.py)."""
    for plan in (*plans, *(t.plan for e in expansions for t in e.task_ops)):
        for node in plan.nodes:
            for field, value in node.kernel.fields:
                check_kernel_literal(field, value, f"fused op {plan.op_type}, node {display(node.name)}")
    for plan, expansion in zip(plans, expansions):
        for rule in expansion.rules:
            check_rule(rule.replacement, f"fused op {plan.op_type}")


def render_package(spec: FusionSpec, package: str = DEFAULT_PACKAGE) -> dict[str, str]:
    package = check_package_name(package)
    if not spec.fused_ops:
        raise HexfuseError(f"fusion spec of {display(spec.model)} has no fused ops: nothing to generate")
    plans: list[OpPlan] = [_guarded(plan_fused_op, op) for op in spec.fused_ops]
    expansions = [_guarded(expand_fused_op, op) for op in spec.fused_ops]
    _check_code(plans, expansions)
    env = _environment()
    op_types = [c_identifier(p.op_type, "fused op type") for p in plans]
    ops_view = [{"plan": p, "inputs": [_port(i, t) for i, t in enumerate(p.inputs)],
                 "outputs": [_port(i, t) for i, t in enumerate(p.outputs)],
                 "node_name": display(spec.fused_ops[i].node_name), "expansion": expansions[i],
                 "reason": display(expansions[i].reason or "", limit=200), "rules": _rules(p, expansions[i])}
                for i, p in enumerate(plans)]
    task_plans = [t.plan for e in expansions for t in e.task_ops]
    context = {"package": package, "version": PACKAGE_VERSION, "domain": display(spec.domain),
               "model": display(spec.model), "target": display(spec.target), "ops": ops_view,
               "library": library_name(package), "host_library": f"lib{package}Host.so",
               "op_packages": op_packages_option(package, op_types, library_name(package), check=False),
               "option_limit": OPTION_LIMIT}
    files = runtime_files()
    for view in ops_view:
        p = view["plan"]
        files[f"src/fused/{p.op_type}.cpp"] = env.get_template("src/fused/op.cpp.j2").render(op=p)
        files[f"src/ops/{p.op_type}.cpp"] = env.get_template("src/ops/op.cpp.j2").render(view=view, **context)
    for task_plan in task_plans:
        files[f"src/tasks/{task_plan.op_type}.cpp"] = env.get_template("src/fused/op.cpp.j2").render(op=task_plan)
    files["src/fused/registry.cpp"] = env.get_template("src/fused/registry.cpp.j2").render(
        package=package, ops=[*plans, *task_plans])
    files[f"src/{package}Interface.cpp"] = env.get_template("src/Interface.cpp.j2").render(**context)
    files[f"config/{package}.xml"] = env.get_template("config/package.xml.j2").render(**context)
    files["Makefile"] = env.get_template("Makefile.j2").render(**context)
    files["README.md"] = env.get_template("README.md.j2").render(**context)
    files[MARKER] = f"generated by hexfuse oppkg for {display(spec.model)}\n"
    return dict(sorted(files.items()))
