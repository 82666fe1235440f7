"""Prepare a model once on x86 and ship the result: an EPContext model (a QNN context binary in an ONNX
wrapper) written by the QNN EP's HTP backend, then loaded back and checked.

    MODEL.onnx --QNN EP, HTP backend (x86), ep.context_enable=1--> OUT.ctx.onnx   [EPContext node]
               (op package registered for every fused op type)    (+ OUT_qnn.bin with embed mode 0)
    OUT.ctx.onnx --load, package registered--> outputs == outputs of the preparing (non-context) session

Package ops and context binaries (measured with onnxruntime-qnn 2.7.0 / QNN 2.51, HTP simulator): the
binary names the package's ops (e.g. `HexFuse::HexFuse_2_393e03__t1`), and loading it without the package
registered fails in QNN's deserializer ("op [...] not found", QNN_CONTEXT_ERROR_CREATE_FROM_BINARY).
So a context model with package ops is loaded with the package registered again; the op types named
in that option do not matter for loading (the library is what is registered), only for claiming nodes.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import onnx

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import folders_made, write_atomic
from hexfuse.tools.ab import models, qnn_session

from .packages import PackageDir, registration, require_op_types

EP_CONTEXT = "EPContext"


@dataclass(frozen=True)
class CompileResult:
    output: Path
    binaries: tuple[Path, ...]         # context binaries written beside OUT (embed mode 0)
    prepare_s: float                   # session creation with ep.context_enable=1 (QNN prepare + write)
    load_s: float                      # session creation from the context model
    outputs: int
    max_abs_diff: float                # context run vs preparing run (0.0: identical)
    claimed: dict[str, int]            # fused op type -> nodes the package claimed while preparing
    outside: dict[str, int] = field(default_factory=dict)  # op types left outside the context (not on QNN)
    schematic: Path | None = None


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def session(path: Path, provider_options: dict[str, str], disable_cpu_fallback: bool,
            context_file: Path | None = None, embed: bool = True):
    """A QNN EP (HTP) session through the plugin path; with ``context_file`` it also writes the context."""
    import onnxruntime as ort

    devices = qnn_session.register_qnn()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if disable_cpu_fallback:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if context_file is not None:
        options.add_session_config_entry("ep.context_enable", "1")
        options.add_session_config_entry("ep.context_file_path", str(context_file))
        options.add_session_config_entry("ep.context_embed_mode", "1" if embed else "0")
    options.add_provider_for_devices(devices, dict(provider_options))
    try:
        return ort.InferenceSession(str(path), options, enable_fallback=0)
    except Exception as exc:
        what = "prepare" if context_file is not None else "load"
        raise HexfuseError(f"cannot {what} {path} on the QNN EP: {_first_line(exc)}") from None


def context_binaries(model: onnx.ModelProto) -> list[str]:
    """File names an EPContext model refers to (embed_mode 0), relative to its folder."""
    names = []
    for node in model.graph.node:
        if node.op_type != EP_CONTEXT:
            continue
        attrs = {a.name: a for a in node.attribute}
        if attrs.get("embed_mode") is not None and attrs["embed_mode"].i == 0:
            names.append(attrs["ep_cache_context"].s.decode())
    return names


def _claimed(assignment: qnn_session.Assignment, fused: dict[str, int]) -> dict[str, int]:
    got = Counter(n["op_type"] for n in assignment.nodes if n["ep"] == qnn_session.QNN_EP and n["op_type"] in fused)
    return {t: got.get(t, 0) for t in sorted(fused)}


def _run(sess, names: list[str], feeds: dict[str, np.ndarray], what: str) -> list:
    try:
        return sess.run(names, feeds)
    except Exception as exc:  # an EP failure: one line, never a traceback
        raise HexfuseError(f"{what} failed on the QNN EP: {_first_line(exc)}") from None


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    """optrace writes its schematic into the working folder."""
    here = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(here)


def _check_paths(model: Path, out: Path) -> None:
    if not model.is_file():
        raise HexfuseError(f"model file not found: {model}")
    if out.exists() and out.is_dir():
        raise HexfuseError(f"output {out} is a directory")
    if out.resolve() == model.resolve():
        raise HexfuseError(f"output {out} is the input model")


def compile_context(model_path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                    provider_options: dict[str, str], feeds: dict[str, np.ndarray], **options) -> CompileResult:
    """Prepare ``model_path`` on the HTP backend, write ``out_path`` atomically, load it back and check it.
    A missing output folder is made, and removed again if nothing was written (io.folders_made)."""
    with folders_made([Path(out_path)]):
        return _compile_context(model_path, out_path, provider_options, feeds, **options)


def _compile_context(model_path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                     provider_options: dict[str, str], feeds: dict[str, np.ndarray], *,
                     disable_cpu_fallback: bool = True, package: PackageDir | None = None,
                     library: Path | None = None, embed: bool = True, allow_inlined: bool = False,
                     schematic: Path | None = None, say: Callable[[str], None] | None = None) -> CompileResult:
    model_file, out = Path(model_path), Path(out_path)
    _check_paths(model_file, out)
    model_file, out = model_file.resolve(), out.resolve()  # (the preparing session runs in a staging folder)
    proto = models.load_model(model_file)
    if any(n.op_type == EP_CONTEXT for n in proto.graph.node):
        raise HexfuseError(f"{model_file} is already a context model (it holds an {EP_CONTEXT} node)")
    fused = dict(Counter(n.op_type for n in models.fused_nodes(proto)))
    if fused and package is None and not allow_inlined:
        raise HexfuseError(f"{model_file} has {sum(fused.values())} fused nodes: give the op package that runs them "
                           f"(--package DIR from `hexfuse oppkg {model_file} -o DIR`); without it the QNN EP inlines them")
    if package is not None:
        if library is None:
            raise HexfuseError(f"op package {package.root}: no library given to register")
        if not fused:
            raise HexfuseError(f"--package given but {model_file} has no fused (hexfuse) node")
        require_op_types(package, sorted(fused), str(model_file))
    if say is not None:
        what = f"op package {package.name} for {len(fused)} op types" if package is not None else "no op package"
        say(f"preparing {model_file} on the QNN EP's HTP backend (x86) with {what}")
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with (registration(package, library, sorted(fused)) if package is not None and library is not None
              else nullcontext(None)) as op_packages:  # (library checked above)
            opts = dict(provider_options, **({"op_packages": op_packages} if op_packages else {}))
            prep_opts = dict(opts, profiling_level="optrace", profiling_file_path=str(stage / "prepare.csv")) \
                if schematic is not None else opts
            staged = stage / out.name
            with _cwd(stage):
                start = time.perf_counter()
                prep = session(model_file, prep_opts, disable_cpu_fallback, staged, embed)
                prepare_s = time.perf_counter() - start
            claimed = _claimed(qnn_session.read_assignment(prep), fused)
            short = {t: n for t, n in claimed.items() if n < fused[t]}
            if package is not None and short:
                raise HexfuseError(f"the op package did not claim fused op(s) {sorted(short)} of {model_file} while "
                                   "preparing: the QNN EP inlined them, the context would not run the package")
            names = [o.name for o in prep.get_outputs()]
            want = _run(prep, names, feeds, f"{model_file} (preparing session)")
            del prep
            if not staged.is_file():
                raise HexfuseError(f"the QNN EP wrote no context model for {model_file} (ep.context_file_path={staged})")
            start = time.perf_counter()
            loaded = session(staged, opts, disable_cpu_fallback)
            load_s = time.perf_counter() - start
            outside = Counter(n["op_type"] for n in qnn_session.read_assignment(loaded).nodes
                              if n["ep"] != qnn_session.QNN_EP)
            got = _run(loaded, names, feeds, f"{out.name} loaded from its context")
            del loaded
        diff = max((float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if np.size(a) else 0.0
                    for a, b in zip(want, got)), default=0.0)
        if diff != 0.0 or not all(np.array_equal(a, b) for a, b in zip(want, got)):
            raise HexfuseError(f"{out.name} loaded from its context gives outputs that differ from the preparing run "
                               f"(max abs {diff:.3g}); nothing written")
        binaries = context_binaries(onnx.load(str(staged), load_external_data=False))
        for name in binaries:  # the model refers to them by name: they land first
            os.replace(stage / name, out.parent / name)
        os.replace(staged, out)
        kept = None
        if schematic is not None:
            found = sorted(stage.glob("*_schematic.bin"), key=lambda p: p.stat().st_size)
            if found:  # (may live on another file system than the staging folder)
                write_atomic(schematic, found[-1].read_bytes())
                kept = schematic
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return CompileResult(out, tuple(out.parent / n for n in binaries), prepare_s, load_s, len(names), diff,
                         claimed, dict(sorted(outside.items())), kept)
