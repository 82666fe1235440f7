"""Engines from what QNN actually schedules: prepare a model on the QNN EP's HTP backend with optrace,
map every final op back to its ONNX node, write the engine map (graph_passes/engines/engine_map.py).

    original.onnx ──QNN EP, HTP (x86 simulator), profiling_level=optrace──> <graph>_schematic.bin
        op table: op id, kernel, flags      low 32 bits of the op id = QNN node id of its origin
        qnn_name_translations               QNN node id -> QNN node name ('conv0_token_9')
        graph_before_optimization           QNN node id -> QNN op ('q::QNN_Conv2d') and its producers
    QNN node name -> ONNX node              the name itself, or without QNN's '_token_<n>' suffix
                                            (graph_passes/cost/profile_rows.node_key)

Measured with onnxruntime-qnn 2.7.0 (QNN 2.51), bundled models: a QDQ unit DQ -> Conv -> Q becomes
one QNN node named after the Conv (``node_conv2d_token_9``); nodes the EP adds (layout
``Transpose_token_108``) and the graph input/output ops match no ONNX node and are kept apart; ORT's
own fusions reach QNN as ``<first node>/<Fusion>_<n>`` (``node_MatMul_281/MatMulAddFusion_2``: the
MatMul with the Add after it). HTP's
optimizer gives the ops of a fused pattern the id of its *last* node: with fp16 precision a
Conv -> Relu pair runs as HMX ``ConvLayer.fp16.s1.tcm`` ops carrying the Relu's id. A matrix kernel
under a node whose QNN op is no matrix op is therefore moved, with that node's other ops, to the matrix
node upstream of it that has no matrix kernel of its own; the other node is recorded as folded into it.

Resources come from the registration flags in the schematic (DESIGN.md section 5): RESOURCE_HMX ->
hmx; FOR_DMA / IS_DMA -> dma (issued on the DMA engine); FOR_HVX / RESOURCE_HVX -> hvx (launched on
an HVX thread); none -> main thread. A kernel's role (matrix / compute / move) is read from its name
and flags: QNN's matrix kernels (optrace._is_matrix_kernel), copies (IS_COPY, DMA) and QNN's layout and
slicing kernels (``_MOVE_KERNELS``) are moves, everything else computes.

The session runs in a child process: a QNN EP failure can abort the whole process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import onnx

from hexfuse.graph_passes.cost.profile_rows import node_key
from hexfuse.graph_passes.engines.engine_map import EngineMap, Kernel, NodeEngines
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import file_sha256
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN
from hexfuse.tools.optrace import Schedule, Step, _is_matrix_kernel, find_schematics, read_schematic
from hexfuse.tools.schedule_reader import qnn_schedule

# The QNN EP preset each bundled target is prepared with (qnn_configs/presets): its SoC, HTP arch, fp16.
TARGET_PRESETS = {"sm8550": "htp_v73_burst", "sm8650": "htp_v75_burst", "sm8750": "htp_v79_burst"}
# QNN's own layout / slicing / copy kernels (names as in the schematics of QNN 2.51): data movement.
_MOVE_KERNELS = ("Transpose", "Concat", "Slice", "StridedSlice", "AlignedSlice", "SlicePad", "Reshape", "ForceFormat",
                 "flat_to_vtcm", "flat_from_vtcm", "InputSlice", "OutputSlice", "Gather", "Split", "zero_to_vtcm",
                 "Pad", "DepthToSpace", "SpaceToDepth", "Tile", "Broadcast", "Expand", "ChannelShuffle")
_MATRIX_QNN_OPS = ("conv2d", "conv3d", "depthwiseconv2d", "transposeconv2d", "fullyconnected", "matmul",
                   "batchmatmul")
_GRAPH_IO = {"q::Input": "<graph input>", "q::Output": "<graph output>", "$Const": "<constants>"}
_REATTRIBUTE_DEPTH = 3  # producers walked from a fused pattern's last node to its matrix node
PREPARE_TIMEOUT_S = 1800


def resource_of(step: Step) -> str:
    flags = step.op_flags
    if "RESOURCE_HMX" in flags or "FOR_HMX" in flags:
        return "hmx"
    if "FOR_DMA" in flags or "IS_DMA" in flags:
        return "dma"
    if "FOR_HVX" in flags or "RESOURCE_HVX" in flags:
        return "hvx"
    return "main"


def role_of(kernel: str, step: Step) -> str:
    if _is_matrix_kernel(kernel):
        return "matrix"
    if "IS_COPY" in step.op_flags or resource_of(step) == "dma" or kernel.lstrip("*").startswith(_MOVE_KERNELS):
        return "move"
    return "compute"


def _kernel_name(step: Step) -> str:
    return step.name.split("::", 1)[-1]


def _is_matrix_qnn_op(operation: str) -> bool:
    bare = operation.split("::", 1)[-1].lower().removeprefix("qnn_").replace("_", "")
    return bare in _MATRIX_QNN_OPS


def _kept(steps: Iterable[Step]) -> list[Step]:
    """One entry per op: a launch/wait pair counts once (its launch), gates and dummies not at all."""
    return [s for s in steps if "MOVE_LATE" not in s.op_flags and "is_dummy_op" not in s.flags
            and not s.name.startswith("@")]


def _reattribute(schedule: Schedule, by_origin: dict[int, list[Step]]) -> dict[int, int]:
    """origin -> matrix node it really belongs to, for ops of a fused pattern named after its last node."""
    moved = {}
    for origin, steps in by_origin.items():
        if not any(_is_matrix_kernel(_kernel_name(s)) for s in steps):
            continue
        if _is_matrix_qnn_op(schedule.operations.get(origin, "")):
            continue
        frontier, seen = [origin], {origin}
        for _ in range(_REATTRIBUTE_DEPTH):
            frontier = [p for node in frontier for p in schedule.producers.get(node, ()) if p not in seen]
            seen.update(frontier)
            hit = [p for p in frontier if _is_matrix_qnn_op(schedule.operations.get(p, ""))
                   and not any(_is_matrix_kernel(_kernel_name(s)) for s in by_origin.get(p, ()))]
            if hit:
                moved[origin] = hit[0]
                break
    return moved


def _summarise(steps: list[Step], qnn_node: str, folded_into: str = "") -> NodeEngines:
    counts = Counter((_kernel_name(s), resource_of(s), role_of(_kernel_name(s), s)) for s in steps)
    order = {"matrix": 0, "compute": 1, "move": 2}
    kernels = tuple(Kernel(n, r, role, c) for (n, r, role), c in sorted(counts.items(), key=lambda kv: (order[kv[0][2]], kv[0])))
    resources = {k.resource for k in kernels}
    matrix = [k.resource for k in kernels if k.role == "matrix"]
    if matrix:
        engine, resource = "matrix", "hmx" if "hmx" in matrix else matrix[0]
    elif not kernels:
        engine, resource = "none", "none"
    elif resources == {"dma"}:
        engine, resource = "dma", "dma"
    else:
        engine, resource = "vector", "hvx" if "hvx" in resources else "main"
    return NodeEngines(engine, resource, kernels, qnn_node, folded_into)


def engine_map_from_schedule(schedule: Schedule, model: onnx.ModelProto, model_name: str, sha256: str, target: str,
                             made_with: dict | None = None) -> EngineMap:
    onnx_names = {node.name: node for node in model.graph.node if node.name}
    by_origin: dict[int, list[Step]] = {}
    for step in _kept(schedule.steps):
        by_origin.setdefault(step.origin, []).append(step)
    moved = _reattribute(schedule, by_origin)

    def onnx_node(qnn_id: int) -> str | None:
        name = schedule.nodes.get(qnn_id)
        return node_key(name, onnx_names) if name else None

    steps_of: dict[str, list[Step]] = {}
    qnn_names: dict[str, str] = {}
    folded: dict[str, str] = {}
    unattributed: dict[str, list[Step]] = {}
    for origin, steps in sorted(by_origin.items()):
        home = moved.get(origin, origin)
        name = onnx_node(home)
        if name is None:
            label = schedule.nodes.get(origin) or _GRAPH_IO.get(schedule.operations.get(origin, ""), f"<qnn node {origin:#x}>")
            unattributed.setdefault(label, []).extend(steps)
            continue
        steps_of.setdefault(name, []).extend(steps)
        qnn_names.setdefault(name, schedule.nodes.get(origin, ""))
        if home != origin and onnx_node(origin) is not None:
            folded[onnx_node(origin)] = name  # type: ignore[index]
    nodes = {name: _summarise(steps, qnn_names[name]) for name, steps in steps_of.items()}
    for name, into in folded.items():
        if name not in nodes:
            nodes[name] = NodeEngines("none", "none", (), "", into)
    absent = tuple(sorted(n for n in onnx_names if n not in nodes))
    happens_before = None
    if schedule.main_list:  # the run lists: QNN's schedule as a happens-before graph, ops named by ONNX node
        happens_before = replace(qnn_schedule(schedule, lambda origin: onnx_node(moved.get(origin, origin)) or "",
                                              _node_macs(model)), graph="")  # QNN's graph name hashes the session
    return EngineMap(model_name, sha256, target, nodes, absent,
                     {label: _summarise(steps, label).kernels for label, steps in unattributed.items()},
                     dict(made_with or {}), schedule=happens_before)


def _node_macs(model: onnx.ModelProto) -> dict[str, int]:
    """MACs per ONNX node from inferred shapes (what the schedule's HMX ops share)."""
    from hexfuse.graph_passes.graph.flat import FlatGraph
    from hexfuse.graph_passes.graph.work import node_work

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx raises several types; no shapes means no MACs, not no map
        return {}
    flat = FlatGraph.build(inferred)
    return {node.name: work.macs for i, node in enumerate(inferred.graph.node)
            if node.name and (work := node_work(flat, i)).macs}


# --- running the QNN EP ----------------------------------------------------------------------------
def provider_options(target: str, preset: str | None) -> tuple[str, dict[str, str]]:
    from hexfuse.tools.ab.presets import load_preset

    name = preset or TARGET_PRESETS.get(target)
    if name is None:
        raise HexfuseError(f"no QNN EP preset is known for target {target!r} (known: "
                           f"{', '.join(f'{t} -> {p}' for t, p in TARGET_PRESETS.items())}); pass --preset")
    loaded = load_preset(name)
    return loaded.name, dict(loaded.provider_options)


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if "error" in line.lower() or "fail" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def prepare_with_optrace(model: Path, options: dict[str, str], folder: Path) -> Path:
    """Prepare ``model`` on the QNN EP (HTP) in a child process, working folder ``folder``; the schematic."""
    command = [sys.executable, "-m", "hexfuse.tools.qnn_engines", str(model.resolve()), json.dumps(options)]
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise HexfuseError(f"the QNN EP took over {PREPARE_TIMEOUT_S} s to prepare {model.name}") from None
    if done.returncode != 0:
        if FALLBACK_SIGN in done.stderr + done.stdout:
            raise HexfuseError(fallback_message(model, cpu_fallback_nodes(model, options, folder)))
        raise HexfuseError(f"the QNN EP could not prepare {model.name} on HTP (exit {done.returncode}): "
                           f"{_last_error(done.stderr + done.stdout)}")
    found = find_schematics(folder)
    if not found:
        raise HexfuseError(f"the QNN EP wrote no optrace schematic for {model.name} (onnxruntime-qnn too old?)")
    return max(found, key=lambda p: p.stat().st_size)


FALLBACK_SIGN = "fallback to CPU EP has been explicitly disabled"  # ORT's words when a node would leave HTP
MAX_NAMED = 3  # nodes named per op type in the fallback message


def qnn_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("onnxruntime_qnn") is not None


def cpu_fallback_nodes(model: Path, options: dict[str, str], folder: Path) -> list[tuple[str, str]]:
    """(name, op type) of each node the QNN EP leaves to the CPU EP: one more session, fallback allowed,
    recording which EP took each node (DESIGN.md 4); [] where that session fails too."""
    command = [sys.executable, "-m", "hexfuse.tools.qnn_engines", "--cpu-nodes", str(model.resolve()), json.dumps(options)]
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return []
    for line in reversed(done.stdout.strip().splitlines()):
        if line.startswith("["):
            return [tuple(pair) for pair in json.loads(line)]
    return []


def fallback_message(model: Path, nodes: list[tuple[str, str]]) -> str:
    """Which nodes HTP would not run, by op type, and what to do."""
    if not nodes:
        listed = "ONNX Runtime did not say which"
    else:
        by_type: dict[str, list[str]] = {}
        for name, op_type in nodes:
            by_type.setdefault(op_type, []).append(name or "(unnamed)")
        listed = "; ".join(f"{op_type} x{len(names)} ({', '.join(repr(n) for n in names[:MAX_NAMED])}"
                           f"{', ...' if len(names) > MAX_NAMED else ''})"
                           for op_type, names in sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0])))
    return (f"the QNN EP cannot run {len(nodes) or 'some'} node(s) of {model.name} on HTP (ONNX Runtime would "
            f"leave them to the CPU EP, and an engine map needs QNN's schedule of every node): {listed}. What to do: "
            "export without those ops or with types and static shapes QNN's HTP supports (a QDQ-quantized export "
            "usually runs fully on HTP); meanwhile `hexfuse analyze` and `fuse` work without a map (op-type rules)")


def _cpu_nodes_child(model: str, options_json: str) -> None:
    """In the child: the nodes a session with CPU fallback allowed puts on another EP than QNN's, as JSON."""
    import onnxruntime as ort

    from hexfuse.tools.ab.qnn_session import QNN_EP, register_qnn

    devices = register_qnn()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    options.add_provider_for_devices(devices, json.loads(options_json))
    session = ort.InferenceSession(model, options)
    print(json.dumps([[node.name, node.op_type] for sub in session.get_provider_graph_assignment_info()
                      if sub.ep_name != QNN_EP for node in sub.get_nodes()]))


def _child(model: str, options_json: str) -> None:
    """In the child: one HTP session with optrace; the schematic lands in the working folder."""
    import onnxruntime as ort

    from hexfuse.tools.ab.qnn_session import register_qnn

    devices = register_qnn()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")  # every node on HTP, or fail
    provider = dict(json.loads(options_json), profiling_level="optrace", profiling_file_path="profile.csv")
    options.add_provider_for_devices(devices, provider)
    ort.InferenceSession(model, options)


def _runtime() -> str:
    try:
        return f"onnxruntime-qnn {metadata.version('onnxruntime-qnn')}"
    except metadata.PackageNotFoundError:
        return "onnxruntime-qnn (version unknown)"


def build_engine_map(model: str | Path, target: str, preset: str | None = None, schematic: str | Path | None = None,
                     keep: str | Path | None = None) -> EngineMap:
    """The engine map of ``model`` for ``target``: from ``schematic`` if given, else by preparing the
    model on the QNN EP (``keep``: a folder to leave the schematic in; else a temporary one)."""
    model = Path(model)
    try:
        proto = onnx.load(str(model), load_external_data=False)
    except Exception as exc:  # onnx raises several types for a bad file
        raise HexfuseError(f"{model}: not a readable ONNX model ({str(exc).splitlines()[0][:200]})") from None
    if any(node.domain == FUSED_DOMAIN for node in proto.graph.node):
        raise HexfuseError(f"{model}: is fused by hexfuse; map the original model (the pass reads the original's map)")
    made_with: dict = {"tool": "hexfuse engines"}
    if schematic is None:
        preset_name, options = provider_options(target, preset)
        made_with.update(runtime=_runtime(), backend="HTP (x86 simulator)", preset=preset_name,
                         provider_options=options)
        if keep is not None:
            try:
                Path(keep).mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise HexfuseError(f"{keep}: exists and is not a directory (--keep takes a folder)") from None
            except OSError as exc:
                raise HexfuseError(f"{keep}: cannot create the --keep folder: {exc.strerror}") from None
            path = prepare_with_optrace(model, options, Path(keep))
            schedule = read_schematic(path)
        else:
            with tempfile.TemporaryDirectory(prefix="hexfuse-optrace-") as folder:
                schedule = read_schematic(prepare_with_optrace(model, options, Path(folder)))
    else:
        made_with["schematic"] = Path(schematic).name
        schedule = read_schematic(schematic)
    made_with["final_ops"] = len(_kept(schedule.steps))
    return engine_map_from_schedule(schedule, proto, model.name, file_sha256(model), target, made_with)


if __name__ == "__main__":
    if sys.argv[1] == "--cpu-nodes":
        _cpu_nodes_child(sys.argv[2], sys.argv[3])
    else:
        _child(sys.argv[1], sys.argv[2])
