"""Build a generated package on the host (system g++, no SDK) or for htp_x86 (make, needs the SDK).

Host objects are cached by content hash (source + headers + flags), so the executor and kernel library
compile once per machine and only the generated plans compile per package.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

CXX_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-pthread", "-Wall", "-Wextra", "-Werror")


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


def compile_objects(root: Path, sources: list[Path]) -> list[Path]:
    """Compile ``sources`` (relative includes from ``root``) into cached objects, in parallel."""
    headers = "".join(p.read_text() for p in sorted((root / "include").rglob("*.h")))
    cxx = compiler()
    flags = CXX_FLAGS
    header_key = hashlib.sha256((headers + cxx + " ".join(flags)).encode()).hexdigest()
    cache = object_cache()

    def compile_one(src: Path) -> Path:
        key = hashlib.sha256((header_key + src.read_text()).encode()).hexdigest()[:32]
        obj = cache / f"{key}.o"
        if not obj.exists():
            tmp = cache / f"{key}.{os.getpid()}.tmp.o"
            try:
                run_tool([cxx, *flags, "-Iinclude", "-c", str(src), "-o", str(tmp)], root)
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
