"""QNN EP through the plugin-library path (DESIGN.md section 4), assignment info, op-package checks.

`providers=["QNNExecutionProvider"]` silently runs on CPU with the 2.7.0 plugin wheel, so sessions are
built only with register_execution_provider_library + get_ep_devices + add_provider_for_devices.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

QNN_EP = "QNNExecutionProvider"
_registered = False


def qnn_available() -> bool:
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        return False
    return True


def register_qnn() -> list:
    """Register the plugin once per process and return the QNN EP devices."""
    global _registered
    import onnxruntime as ort
    try:
        import onnxruntime_qnn
    except ImportError:
        raise HexfuseError("--ep qnn needs the onnxruntime-qnn package (pip install 'hexfuse[qnn]')") from None
    if not _registered:
        try:
            ort.register_execution_provider_library(QNN_EP, onnxruntime_qnn.get_library_path())
        except Exception as e:  # registered elsewhere in this process: fine, anything else is not
            if "already registered" not in str(e):
                raise HexfuseError(f"cannot register the QNN EP plugin: {str(e).splitlines()[0]}") from None
        _registered = True
    devs = [d for d in ort.get_ep_devices() if d.ep_name == QNN_EP]
    if not devs:
        raise HexfuseError("the QNN EP plugin is registered but offers no device")
    return devs


def op_packages_option(op_types: list[str], lib: str, pkg: str, target: str = "CPU") -> str:
    """One entry per fused op_type: the EP matches packages by op_type only."""
    return ",".join(f"{t}:{lib}:{pkg}InterfaceProvider:{target}" for t in op_types)


def check_op_package_lib(lib: str | None) -> str | None:
    if lib is None:
        return None
    p = Path(lib)
    if not p.is_file():
        raise HexfuseError(f"op package library not found: {lib}")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"\x7fELF" and magic[:2] != b"MZ":
        raise HexfuseError(f"op package library is not a shared library (ELF or DLL): {lib}")
    return str(p.resolve())


@dataclass
class Assignment:
    """Which EP ran which node, from get_provider_graph_assignment_info()."""
    nodes: list[dict] = field(default_factory=list)  # {"ep", "name", "op_type", "domain", "subgraph"}

    @property
    def per_ep(self) -> dict[str, int]:
        return dict(Counter(n["ep"] for n in self.nodes))

    @property
    def n_subgraphs(self) -> int:
        return len({n["subgraph"] for n in self.nodes})

    def all_on(self, ep: str) -> bool:
        return bool(self.nodes) and all(n["ep"] == ep for n in self.nodes)

    def summary(self) -> dict:
        return {"nodes_per_ep": self.per_ep, "n_subgraphs": self.n_subgraphs,
                "all_on_qnn": self.all_on(QNN_EP), "nodes": self.nodes}


def read_assignment(session) -> Assignment:
    out = Assignment()
    for i, sg in enumerate(session.get_provider_graph_assignment_info()):
        for n in sg.get_nodes():
            out.nodes.append({"ep": sg.ep_name, "name": n.name, "op_type": n.op_type,
                              "domain": n.domain, "subgraph": i})
    return out


def qnn_provider_options(base: dict[str, str], profile_csv: str | None = None, level: str = "detailed",
                         op_packages: str | None = None) -> dict[str, str]:
    opts = dict(base)
    if profile_csv:
        opts["profiling_level"] = level
        opts["profiling_file_path"] = os.fspath(profile_csv)
    if op_packages:
        opts["op_packages"] = op_packages
    return opts
