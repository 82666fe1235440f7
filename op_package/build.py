"""Build a generated package on the host (system g++, no SDK) or for htp_x86 (make, needs the SDK).

Host objects are cached by content hash (source + headers + flags), so the executor and kernel library
compile once per machine and only the generated plans compile per package. Those plans (src/fused,
src/tasks) are small files that open with the same includes, whose parsing was 80% of each compile: with
GCC they are compiled against one precompiled header of that prelude, cached beside the objects (the
objects come out byte-identical; a compiler that cannot use it parses the header as text), and without
two optimisation passes that only slowed the compile of their tables (PLAN_FLAGS).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

try:
    import fcntl
except ImportError:  # (not on Windows: builds there are not shared)
    fcntl = None  # type: ignore[assignment]

CXX_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-pthread", "-Wall", "-Wextra", "-Werror")
# GCC, plans only: a plan is constant tables filled once when the library loads, and these two -O2 passes
# spent half of a plan's compile on those initializers (lookup tables of 256 entries); the kernels keep them.
PLAN_FLAGS = ("-fno-tree-slp-vectorize", "-fno-tree-dse")
PLAN_DIRS = ("fused", "tasks")  # generated per spec: a new object per package, the same includes in each
MIN_PCH_SOURCES = 3  # fewer plans to compile than this: parsing the prelude each time is cheaper than a PCH


def object_cache() -> Path:
    root = os.environ.get("HEXFUSE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hexfuse")
    path = Path(root) / "obj"
    _mkdir(path, "the object cache (set HEXFUSE_CACHE to a writable folder)")
    return path


def _mkdir(path: Path, what: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HexfuseError(f"cannot create {what} {path}: {exc.strerror}") from None


@contextlib.contextmanager
def cache_lock(key: str, kind: str = "obj") -> Iterator[None]:
    """Held while one process makes the cache entry ``key`` (a hex digest), so that two processes (two
    test workers, two users' builds) that want the same object make it once: the second waits, then finds
    it. One of 256 lock files per ``kind`` by the key's first two digits; never nest two of one kind (two
    locks on one file in one process exclude each other). No lock where fcntl is missing."""
    if fcntl is None:
        yield
        return
    folder = object_cache() / "locks" / kind
    _mkdir(folder, "the object cache's lock folder")
    with open(folder / key[:2], "a+") as handle:  # (a separate open file per thread: flock excludes them too)
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def compiler() -> str:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise HexfuseError(f"C++ compiler {cxx!r} not found (set CXX)")
    return cxx


def run_tool(cmd: list[str], cwd: Path) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except OSError as exc:
        raise HexfuseError(f"cannot run {cmd[0]}: {exc.strerror}") from None
    if proc.returncode != 0 or proc.stderr.strip():
        first = (proc.stderr or proc.stdout).strip().splitlines()[:12]
        raise HexfuseError(f"host build failed in {cwd}: {' | '.join(first)}")


def portable_sources(root: Path) -> list[Path]:
    """Executor, kernels, generated plans and the host C ABI: what every host-side build links."""
    return sorted(p for p in (root / "src").rglob("*.cpp") if p.parent.name in ("runtime", "kernels", "matrix", "fused", "tasks", "host"))


def _prelude(src: Path) -> list[str]:
    """The ``#include`` lines a source opens with (before its first other line, comments aside)."""
    lines = []
    for line in src.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#include"):
            lines.append(stripped)
        elif stripped and not stripped.startswith("//"):
            break
    return lines


@functools.cache
def _is_gcc(cxx: str) -> bool:
    """GCC (not clang, which names its precompiled headers differently): it defines __GNUC__ alone."""
    try:
        proc = subprocess.run([cxx, "-dM", "-E", "-x", "c++", os.devnull], capture_output=True, text=True)
    except OSError:
        return False
    return proc.returncode == 0 and "__GNUC__" in proc.stdout and "__clang__" not in proc.stdout


def _precompiled_prelude(root: Path, plans: list[Path], cxx: str, flags: tuple[str, ...],
                         key: str) -> tuple[list[str], set[Path]]:
    """``-include`` flags of a precompiled header of the includes most plans open with, and the plans that
    open with them (src/fused/registry.cpp does not). Built once per header set, compiler and flags in the
    object cache; none where it does not pay or GCC is not the compiler."""
    if not plans or not _is_gcc(cxx):
        return [], set()
    preludes = {src: tuple(_prelude(src)) for src in plans}
    common = Counter(preludes.values()).most_common(1)[0][0]
    users = {src for src, lines in preludes.items() if lines == common}
    if not common:
        return [], set()
    text = "// Generated by hexfuse.op_package.build: the includes the plans open with.\n" + "\n".join(common) + "\n"
    digest = hashlib.sha256((key + " ".join(flags) + text).encode()).hexdigest()[:32]
    folder = object_cache() / f"pch_{digest}"
    header, gch = folder / "prelude.h", folder / "prelude.h.gch"
    if not (gch.exists() and header.exists()):
        if len(users) < MIN_PCH_SOURCES:
            return [], set()
        with cache_lock(digest):
            if not (gch.exists() and header.exists()):  # (another process may have made it meanwhile)
                _make_prelude(root, cxx, flags, text, folder)
    return ["-include", str(header)], users


def _make_prelude(root: Path, cxx: str, flags: tuple[str, ...], text: str, folder: Path) -> None:
    header, gch = folder / "prelude.h", folder / "prelude.h.gch"
    _mkdir(folder, "the object cache")
    tmp_header = folder / f"prelude.{os.getpid()}.tmp.h"
    tmp = folder / f"prelude.{os.getpid()}.tmp.gch"
    try:
        tmp_header.write_text(text)
        os.replace(tmp_header, header)  # (the same text whoever writes it)
        run_tool([cxx, *flags, "-Iinclude", "-x", "c++-header", str(header), "-o", str(tmp)], root)
        os.replace(tmp, gch)
    except OSError as exc:
        raise HexfuseError(f"cannot store {gch}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
        tmp_header.unlink(missing_ok=True)


def compile_objects(root: Path, sources: list[Path]) -> list[Path]:
    """Compile ``sources`` (relative includes from ``root``) into cached objects, in parallel."""
    headers = "".join(p.read_text() for p in sorted((root / "include").rglob("*.h")))
    cxx = compiler()
    flags = CXX_FLAGS
    header_key = hashlib.sha256((headers + cxx + " ".join(flags)).encode()).hexdigest()
    cache = object_cache()

    plan_flags = (*flags, *PLAN_FLAGS) if _is_gcc(cxx) else flags

    def flags_of(src: Path) -> tuple[str, ...]:
        return plan_flags if src.parent.name in PLAN_DIRS else flags

    def object_of(src: Path) -> Path:
        extra = " ".join(flags_of(src)[len(flags):])  # (nothing for the kernels: their keys stay as they were)
        return cache / f"{hashlib.sha256((header_key + extra + src.read_text()).encode()).hexdigest()[:32]}.o"

    missing = [src for src in sources if src.parent.name in PLAN_DIRS and not object_of(src).exists()]
    pch, pch_users = _precompiled_prelude(root, missing, cxx, plan_flags, header_key)

    def compile_one(src: Path) -> Path:
        obj = object_of(src)
        if obj.exists():
            return obj
        with cache_lock(obj.stem):
            if obj.exists():  # made by another process while this one waited
                return obj
            tmp = obj.with_name(f"{obj.stem}.{os.getpid()}.{threading.get_ident()}.tmp.o")
            extra = pch if src in pch_users else []
            try:
                run_tool([cxx, *flags_of(src), *extra, "-Iinclude", "-c", str(src), "-o", str(tmp)], root)
                os.replace(tmp, obj)
            except OSError as exc:
                raise HexfuseError(f"cannot store {obj}: {exc.strerror}") from None
            finally:
                tmp.unlink(missing_ok=True)  # a failed or interrupted compile leaves no partial object
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(compile_one, sources))


def package_name(root: Path) -> str:
    return next((root / "config").glob("*.xml")).stem


def build_host(package_dir: str | os.PathLike[str]) -> Path:
    """Compile DIR's portable sources + host C ABI into DIR/build/host/lib<Pkg>Host.so."""
    root = Path(package_dir).resolve()
    sources = portable_sources(root)
    if not sources:
        raise HexfuseError(f"{root} holds no generated sources")
    objects = compile_objects(root, sources)
    out = root / "build" / "host" / f"lib{package_name(root)}Host.so"
    _mkdir(out.parent, "the build folder")
    run_tool([compiler(), "-shared", "-pthread", *map(str, objects), "-o", str(out)], root)
    return out


def check_htp_x86_tools() -> None:
    """What `make htp_x86` needs from the environment, checked before anything is written."""
    root = os.environ.get("QNN_SDK_ROOT")
    if not root:
        raise HexfuseError("--build htp_x86 needs QNN_SDK_ROOT (the Qualcomm AI Engine Direct SDK, the release of "
                           "the runtime that will load the package)")
    if not Path(root).is_dir():
        raise HexfuseError(f"--build htp_x86: QNN_SDK_ROOT={root} is not a directory")
    if not (Path(root) / "include" / "QNN").is_dir():  # what the Makefile compiles against
        raise HexfuseError(f"--build htp_x86: QNN_SDK_ROOT={root} holds no include/QNN: not a QNN SDK")
    if shutil.which("make") is None:
        raise HexfuseError("make not found")


def build_htp_x86(package_dir: str | os.PathLike[str]) -> Path:
    """Run the package's `make htp_x86` (clang + libc++ against the SDK headers, linked with libQnnHtp.so).

    The Makefile reads QNN_SDK_ROOT, HEXAGON_SDK_ROOT / X86_LIBNATIVE_DIR, X86_CXX, QNN_HTP_LIB_DIR,
    EXTRA_CXXFLAGS and EXTRA_LDFLAGS from the environment, which make inherits from this process."""
    root = Path(package_dir).resolve()
    check_htp_x86_tools()
    jobs = str(max(1, os.cpu_count() or 1))
    env = {"PYTHON": sys.executable, **os.environ}  # the Makefile asks this Python where onnxruntime-qnn is
    proc = subprocess.run(["make", "-j", jobs, "htp_x86"], cwd=root, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [line for line in (proc.stdout + proc.stderr).strip().splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower()] or lines
        raise HexfuseError(f"htp_x86 build failed in {root}: {' | '.join(errors[-4:])}")
    library = next((root / "build" / "x86_64-linux-clang").glob("*.so"), None)
    if library is None:
        raise HexfuseError(f"htp_x86 build in {root} produced no library")
    return library
