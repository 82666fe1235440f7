"""Render a fusion spec into the op package source tree: a pure function spec -> {relative path: text}.

    DIR/
      README.md                     how to build, the exact op_packages provider string
      Makefile                      host | htp_x86 | htp_v73 | htp_v75 | htp_v79 | htp_aarch64
      config/<Pkg>.xml              qnn-op-package-generator OpDef config
      include/hexfuse/...           executor + kernel headers (copied from hexfuse.op_package/runtime)
      src/<Pkg>Interface.cpp        QNN interface provider (SDK glue)
      src/ops/<OpType>.cpp          one classic HTP op per fused op (SDK glue)
      src/fused/<OpType>.cpp        the op's executor plan: kernel params + micro-op tables
      src/fused/registry.cpp        plan table (host ABI op index = spec order)
      src/runtime, src/kernels      executor and kernel library (copied)
      src/host/host_api.cpp         C ABI of the host build (copied)

Templates hold layout only; every value is computed here or in plan.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec import FusionSpec, TensorSpec
from hexfuse.op_package.plan import OpPlan, plan_fused_op

HERE = Path(__file__).parent
RUNTIME = HERE / "runtime"
TEMPLATES = HERE / "templates"
DEFAULT_PACKAGE = "HexFuse"
PACKAGE_VERSION = "1.0.0"

QNN_DTYPES = {"float32": "QNN_DATATYPE_FLOAT_32", "int32": "QNN_DATATYPE_INT_32",
              "int64": "QNN_DATATYPE_INT_32",  # the QNN EP narrows int64 to int32; the glue widens back
              "uint8": "QNN_DATATYPE_UFIXED_POINT_8", "int8": "QNN_DATATYPE_SFIXED_POINT_8",
              "uint16": "QNN_DATATYPE_UFIXED_POINT_16", "int16": "QNN_DATATYPE_SFIXED_POINT_16",
              "bool": "QNN_DATATYPE_BOOL_8"}

PLAIN_QNN_DTYPES = {"uint8": "QNN_DATATYPE_UINT_8", "int8": "QNN_DATATYPE_INT_8", "uint16": "QNN_DATATYPE_UINT_16",
                    "int16": "QNN_DATATYPE_INT_16"}  # integer tensors without quantization params


@dataclass(frozen=True)
class PortSpec:
    """One input/output of a fused op as the SDK glue and the XML see it."""
    index: int
    name: str
    dtype: str
    qnn_dtype: str
    shape: tuple[int, ...]
    static: bool
    widen: bool  # int64 in the spec: arrives as int32 from the QNN EP


def _ports(tensors: tuple[TensorSpec, ...]) -> list[PortSpec]:
    ports = []
    for i, t in enumerate(tensors):
        if t.dtype not in QNN_DTYPES:
            raise HexfuseError(f"fused op port {t.name!r}: dtype {t.dtype} has no QNN datatype in the op package")
        qnn = QNN_DTYPES[t.dtype] if t.quant is not None else PLAIN_QNN_DTYPES.get(t.dtype, QNN_DTYPES[t.dtype])
        ports.append(PortSpec(i, t.name, t.dtype, qnn, tuple(t.shape), t.static, t.dtype == "int64"))
    return ports


def _cstr(text: str) -> str:
    return json.dumps(text)  # a valid C string literal for the names we emit (ASCII-escaped)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["cstr"] = _cstr
    env.filters["prod"] = lambda shape: max(1, int(__import__("math").prod(shape)))
    return env


def check_package_name(name: str) -> str:
    # DESIGN.md 4: the package name is the interface symbol prefix, so it must be a C identifier.
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise HexfuseError(f"package name {name!r} must be a C identifier (it prefixes <Pkg>InterfaceProvider)")
    return name


def runtime_files() -> dict[str, str]:
    files = {}
    for path in sorted(RUNTIME.rglob("*")):
        if path.is_file() and path.suffix in (".h", ".cpp"):
            files[path.relative_to(RUNTIME).as_posix()] = path.read_text(encoding="utf-8")
    return files


def op_packages_option(package: str, op_types: list[str], library: str) -> str:
    """The QNN EP provider option: one entry per op type, target CPU for the x86 simulator build."""
    return ",".join(f"{op}:{library}:{package}InterfaceProvider:CPU" for op in op_types)


def library_name(package: str) -> str:
    return f"libQnn{package}.so"


def render_package(spec: FusionSpec, package: str = DEFAULT_PACKAGE) -> dict[str, str]:
    package = check_package_name(package)
    if not spec.fused_ops:
        raise HexfuseError(f"fusion spec of {spec.model} has no fused ops: nothing to generate")
    plans: list[OpPlan] = [plan_fused_op(op) for op in spec.fused_ops]
    env = _environment()
    op_types = [p.op_type for p in plans]
    ops_view = [{"plan": p, "inputs": _ports(p.inputs), "outputs": _ports(p.outputs),
                 "node_name": spec.fused_ops[i].node_name} for i, p in enumerate(plans)]
    context = {"package": package, "version": PACKAGE_VERSION, "domain": spec.domain, "model": spec.model,
               "target": spec.target, "ops": ops_view, "library": library_name(package),
               "host_library": f"lib{package}Host.so",
               "op_packages": op_packages_option(package, op_types, library_name(package)),
               "sources": sorted(f"src/fused/{t}.cpp" for t in op_types)}
    files = runtime_files()
    for view in ops_view:
        p = view["plan"]
        files[f"src/fused/{p.op_type}.cpp"] = env.get_template("src/fused/op.cpp.j2").render(op=p)
        files[f"src/ops/{p.op_type}.cpp"] = env.get_template("src/ops/op.cpp.j2").render(view=view, **context)
    files["src/fused/registry.cpp"] = env.get_template("src/fused/registry.cpp.j2").render(
        package=package, ops=plans)
    files[f"src/{package}Interface.cpp"] = env.get_template("src/Interface.cpp.j2").render(**context)
    files[f"config/{package}.xml"] = env.get_template("config/package.xml.j2").render(**context)
    files["Makefile"] = env.get_template("Makefile.j2").render(**context)
    files["README.md"] = env.get_template("README.md.j2").render(**context)
    return dict(sorted(files.items()))
