"""Engine map: which kernels QNN's HTP backend runs for each ONNX node, and on which resource.

The pass classifies nodes by op type (classify.py). What QNN actually schedules can differ: a QDQ
uint8 Conv runs on HMX with DMA weight moves and HVX helpers beside it, an fp32 MatMul runs on an HVX
kernel, a Transpose is an HVX kernel (not a DMA transfer), a Relu after a Conv vanishes into it. The
tool ``hexfuse engines`` (tools/qnn_engines.py) prepares the original model on the QNN EP with
``profiling_level=optrace`` and writes that evidence as this map: our own derived data, one JSON file
per model (sha256) and target.

    {"schema": "hexfuse.engine_map/1", "model": "m.onnx", "model_sha256": "…", "target": "sm8650",
     "made_with": {...},                                       how the schematic was produced
     "nodes": {"conv0": {"engine": "matrix", "resource": "hmx", "qnn_node": "conv0_token_9",
                         "kernels": [["ConvLayer_s1.opt", "hmx", "matrix", 4],
                                     ["ConvLayer.opt.weights_to_vtcm", "dma", "move", 1]]},
               "relu0": {"engine": "none", "resource": "none", "folded_into": "conv0", "kernels": []}},
     "absent": ["w_DequantizeLinear", …],                     nodes with no op in the final schedule
     "unattributed": {"Transpose_token_108": [["Transpose_impl", "hvx", "move", 1]]}}   QNN's own nodes

``engine``: matrix (a matrix kernel: HMX or, for float without fp16, HVX), vector (HVX or main-thread
kernels), dma (every kernel on the DMA engine), none (no op of its own: folded or removed by QNN).
The pass reads it as data (it never imports the tool); ``find_engine_map`` looks it up.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hexfuse.graph_passes.engines.qnn_schedule import QnnSchedule
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import write_atomic

SCHEMA = "hexfuse.engine_map/1"
ENGINES = ("matrix", "vector", "dma", "none")
RESOURCES = ("hmx", "hvx", "dma", "main", "none")
ROLES = ("matrix", "compute", "move")  # a kernel's job: matrix work, other arithmetic, data movement
CACHE_ENV = "HEXFUSE_ENGINES_CACHE"  # overrides the cache folder (tests point it at a temporary one)


@dataclass(frozen=True)
class Kernel:
    name: str  # QNN's kernel, e.g. 'ConvLayer_s1.opt', 'Transpose_impl'
    resource: str  # hmx | hvx | dma | main: the run list / engine its registration flags put it on
    role: str  # matrix | compute | move
    count: int = 1  # ops of this kernel in the final schedule (QNN slices big ops)


@dataclass(frozen=True)
class NodeEngines:
    engine: str  # matrix | vector | dma | none
    resource: str  # where its main work runs: hmx | hvx | dma | main | none
    kernels: tuple[Kernel, ...] = ()
    qnn_node: str = ""  # QNN's name of the node these ops came from
    folded_into: str = ""  # the ONNX node whose op QNN fused this one into

    @property
    def moves_only(self) -> bool:
        """Every kernel moves data (layout conversions, copies): no arithmetic of its own."""
        return bool(self.kernels) and all(k.role == "move" for k in self.kernels)

    @property
    def hvx_slices(self) -> int:
        """How many HVX ops QNN cut its main HVX work into (the most of one kernel); 0: none on HVX."""
        main = [k for k in self.kernels if k.resource == "hvx" and (k.role == "matrix") == (self.engine == "matrix")]
        return max((k.count for k in main), default=0)

    def side_kernels(self, resource: str) -> tuple[Kernel, ...]:
        """Kernels on ``resource`` beside the main work (a matrix op's HVX helpers, its DMA weight moves)."""
        return tuple(k for k in self.kernels if k.resource == resource and k.role != "matrix")

    def describe(self) -> str:
        """'hmx: ConvLayer_s1.opt x4; dma: ConvLayer.opt.weights_to_vtcm' (kernels by resource)."""
        if not self.kernels:
            return f"folded into {self.folded_into} by QNN" if self.folded_into else "no op of its own in QNN's schedule"
        parts: dict[str, list[str]] = {}
        for kernel in self.kernels:
            parts.setdefault(kernel.resource, []).append(kernel.name + (f" x{kernel.count}" if kernel.count > 1 else ""))
        return "; ".join(f"{resource}: {', '.join(names)}" for resource, names in parts.items())


_NO_OP = NodeEngines("none", "none")  # a node QNN runs no op for (part of a QDQ unit, folded, or removed)


@dataclass(frozen=True)
class EngineMap:
    model: str  # file name of the model it was made from
    model_sha256: str
    target: str
    nodes: dict[str, NodeEngines]  # ONNX node name -> what QNN runs for it
    absent: tuple[str, ...] = ()  # ONNX nodes with no op in the final schedule (folded, or part of a QDQ unit)
    unattributed: dict[str, tuple[Kernel, ...]] = field(default_factory=dict)  # QNN-inserted nodes, graph I/O
    made_with: dict[str, Any] = field(default_factory=dict)
    path: str = field(default="", compare=False)  # where it was read from ("" when built in memory)
    # QNN's schedule of the original model as a happens-before graph (qnn_schedule.py): what the
    # HTP decisions replay; absent from maps made before it was recorded
    schedule: QnnSchedule | None = field(default=None, compare=False)

    def node(self, name: str) -> NodeEngines | None:
        """The node's entry; a node with no op in the final schedule gets an empty one; None if unknown."""
        if not name:
            return None
        found = self.nodes.get(name)
        if found is None and name in self._absent:
            return _NO_OP
        return found

    @property
    def _absent(self) -> frozenset[str]:
        cached = self.__dict__.get("_absent_set")
        if cached is None:
            cached = frozenset(self.absent)
            object.__setattr__(self, "_absent_set", cached)  # frozen dataclass: a cache, not state
        return cached

    def to_json(self) -> str:
        def kernels(ks: tuple[Kernel, ...]) -> list[list[Any]]:
            return [[k.name, k.resource, k.role, k.count] for k in ks]

        nodes = {}
        for name, node in sorted(self.nodes.items()):
            entry: dict[str, Any] = {"engine": node.engine, "resource": node.resource, "kernels": kernels(node.kernels)}
            if node.qnn_node:
                entry["qnn_node"] = node.qnn_node
            if node.folded_into:
                entry["folded_into"] = node.folded_into
            nodes[name] = entry
        raw = {"schema": SCHEMA, "model": self.model, "model_sha256": self.model_sha256, "target": self.target,
               "made_with": self.made_with, "nodes": nodes, "absent": sorted(self.absent),
               "unattributed": {name: kernels(ks) for name, ks in sorted(self.unattributed.items())}}
        text = json.dumps(raw, indent=1, sort_keys=True)
        if self.schedule is None:
            return text + "\n"
        # the schedule's ops one row a line: a thousand ops stay a thousand lines
        schedule = self.schedule.to_json()
        rows = ",\n  ".join(json.dumps(row, separators=(",", ":")) for row in schedule["ops"])
        head = json.dumps({k: v for k, v in schedule.items() if k != "ops"}, sort_keys=True)[:-1]
        return f'{text[:-2]},\n "schedule": {head}, "ops": [\n  {rows}\n ]}}\n}}\n'


    def write(self, path: Path) -> None:
        write_atomic(path, self.to_json().encode())


def _fail(where: str, problem: str) -> HexfuseError:
    return HexfuseError(f"engine map {where}: {problem}")


def _kernels(raw: Any, where: str) -> tuple[Kernel, ...]:
    if not isinstance(raw, list):
        raise _fail(where, "kernels must be a list of [name, resource, role, count]")
    out = []
    for item in raw:
        if (not isinstance(item, list) or len(item) != 4 or not isinstance(item[0], str) or item[1] not in RESOURCES
                or item[2] not in ROLES or not isinstance(item[3], int) or isinstance(item[3], bool) or item[3] < 1):
            raise _fail(where, f"bad kernel entry {item!r} (expected [name, {'|'.join(RESOURCES[:4])}, "
                               f"{'|'.join(ROLES)}, count >= 1])")
        out.append(Kernel(item[0], item[1], item[2], item[3]))
    return tuple(out)


def engine_map_from_json(text: str, where: str) -> EngineMap:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(where, f"not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise _fail(where, f"not a {SCHEMA} file (schema {raw.get('schema') if isinstance(raw, dict) else None!r})")
    for key in ("model", "model_sha256", "target"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(where, f"field {key!r} must be a non-empty string")
    nodes_raw = raw.get("nodes")
    if not isinstance(nodes_raw, dict):
        raise _fail(where, "field 'nodes' must be an object of node name -> entry")
    nodes = {}
    for name, entry in nodes_raw.items():
        here = f"{where}: node {name!r}"
        if not isinstance(entry, dict) or entry.get("engine") not in ENGINES or entry.get("resource") not in RESOURCES:
            raise _fail(here, f"needs engine in {ENGINES} and resource in {RESOURCES}")
        nodes[name] = NodeEngines(entry["engine"], entry["resource"], _kernels(entry.get("kernels", []), here),
                                  str(entry.get("qnn_node", "")), str(entry.get("folded_into", "")))
    absent = raw.get("absent", [])
    unattributed = raw.get("unattributed", {})
    if not isinstance(absent, list) or not all(isinstance(a, str) for a in absent) or not isinstance(unattributed, dict):
        raise _fail(where, "'absent' must be a list of names and 'unattributed' an object")
    made_with = raw.get("made_with", {})
    schedule = QnnSchedule.from_json(raw["schedule"], f"engine map {where}") if "schedule" in raw else None
    return EngineMap(raw["model"], raw["model_sha256"], raw["target"], nodes, tuple(absent),
                     {k: _kernels(v, f"{where}: unattributed {k!r}") for k, v in unattributed.items()},
                     made_with if isinstance(made_with, dict) else {}, where, schedule)


def load_engine_map(path: str | Path) -> EngineMap:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _fail(str(path), f"cannot read: {exc.strerror}") from None
    return engine_map_from_json(text, str(path))


# --- where maps live -------------------------------------------------------------------------------
def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$HEXFUSE_ENGINES_CACHE``, else ``$XDG_CACHE_HOME/hexfuse/engines``, else ``~/.cache/hexfuse/engines``."""
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV])
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hexfuse" / "engines"


def cache_path(sha256: str, target: str, environ: Mapping[str, str] = os.environ) -> Path:
    return cache_dir(environ) / f"{sha256}.{target}.json"


def beside_path(model: str | Path, target: str) -> Path:
    """A map shipped with the model: ``<model folder>/engines/<model stem>.<target>.json``."""
    model = Path(model)
    return model.parent / "engines" / f"{model.stem}.{target}.json"


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False where a folder on the way cannot be searched: a map there is out of
    reach, as if absent (maps only sharpen the estimate; the op-type rules decide without one)."""
    try:
        return path.is_file()
    except PermissionError:
        return False


@dataclass(frozen=True)
class Lookup:
    engine_map: EngineMap | None
    note: str  # where it came from, or why there is none (reports print it)


def find_engine_map(model: str | Path, sha256: str, target: str, explicit: str | Path | None = None,
                    environ: Mapping[str, str] = os.environ) -> Lookup:
    """The map for this model file and target: ``explicit`` (must be for this model), else one shipped
    beside the model, else the user cache; none found means the op-type rules decide."""
    if explicit is not None:
        found = load_engine_map(explicit)
        if found.model_sha256 != sha256:
            raise _fail(str(explicit), f"made from {found.model} (sha256 {found.model_sha256[:12]}…), "
                                       f"not from {Path(model).name} (sha256 {sha256[:12]}…)")
        note = f"engine map {explicit}"
        if found.target != target:
            note += f" (made for target {found.target}, used for {target})"
        return Lookup(found, note)
    stale = []
    for candidate in (beside_path(model, target), cache_path(sha256, target, environ)):
        if _is_file(candidate):
            found = load_engine_map(candidate)
            if found.model_sha256 == sha256 and found.target == target:
                return Lookup(found, f"engine map {candidate}")
            stale.append(str(candidate))
    why = f" ({', '.join(stale)} made from another version of the model)" if stale else ""
    return Lookup(None, f"no engine map for target {target}{why}: op-type rules decide "
                        f"(`hexfuse engines {shlex.quote(str(model))} --target {target}` makes one)")
