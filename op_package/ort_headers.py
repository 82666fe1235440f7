"""Find ONNX Runtime's C API headers, which the CPU custom-op library (``ort_build.py``) compiles against.

Where they come from, first hit wins:

    $ORT_INCLUDE_DIR                      a directory holding onnxruntime_c_api.h
    /usr/include/onnxruntime              Debian's libonnxruntime-dev, when installed (trixie and later)
    ~/.cache/hexfuse/ort-headers/include  filled by ``python -m hexfuse.op_package.ort_headers``

Debian 12 (this project's machines) has no ONNX Runtime package, so the fetch step asks apt for Debian 13's
``libonnxruntime-dev`` (headers and cmake files only, no library) with a private source list and state
directory, and unpacks it with ``dpkg-deb``: the system's apt configuration is left alone. No ONNX Runtime
source lives in this repository.

The C API is forward compatible: a library built against headers of API version N asks the runtime for
version N, which every runtime of version >= 1.N serves. ``check_runtime`` says so when it does not hold.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

HEADER = "onnxruntime_c_api.h"
DEBIAN_PACKAGE = "libonnxruntime-dev"
DEBIAN_SOURCE = "deb http://deb.debian.org/debian trixie main"
SYSTEM_DIR = Path("/usr/include/onnxruntime")
FETCH_HINT = ("run `python -m hexfuse.op_package.ort_headers` (fetches Debian's libonnxruntime-dev headers) "
              "or set ORT_INCLUDE_DIR to a directory holding onnxruntime_c_api.h")


def cache_dir() -> Path:
    root = os.environ.get("HEXFUSE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hexfuse")
    return Path(root) / "ort-headers"


def _has_header(path: Path) -> bool:
    return (path / HEADER).is_file() and (path / "onnxruntime_cxx_api.h").is_file()


def find_headers() -> Path | None:
    """The include directory to compile against, or None when no source has them."""
    env = os.environ.get("ORT_INCLUDE_DIR")
    if env:
        if not _has_header(Path(env)):
            raise HexfuseError(f"ORT_INCLUDE_DIR={env} holds no {HEADER} and onnxruntime_cxx_api.h")
        return Path(env)
    for candidate in (SYSTEM_DIR, cache_dir() / "include"):
        if _has_header(candidate):
            return candidate
    return None


def require_headers() -> Path:
    found = find_headers()
    if found is None:
        raise HexfuseError(f"ONNX Runtime C API headers not found: {FETCH_HINT}")
    return found


def api_version(include_dir: Path) -> int:
    """ORT_API_VERSION of the headers (the runtime must serve at least this version)."""
    match = re.search(r"#define\s+ORT_API_VERSION\s+(\d+)", (include_dir / HEADER).read_text(errors="replace"))
    if not match:
        raise HexfuseError(f"{include_dir / HEADER}: no ORT_API_VERSION")
    return int(match.group(1))


def check_runtime(include_dir: Path) -> None:
    """Refuse headers newer than the installed onnxruntime: it could not serve their API version."""
    import onnxruntime

    minor = int(onnxruntime.__version__.split(".")[1])
    wanted = api_version(include_dir)
    if wanted > minor:
        raise HexfuseError(f"ONNX Runtime headers in {include_dir} are API version {wanted}, newer than the installed "
                           f"onnxruntime {onnxruntime.__version__}; use headers of 1.{minor} or older")


def _apt(args: list[str], state: Path) -> None:
    options = ["-o", f"Dir::Etc::sourcelist={state / 'sources.list'}", "-o", "Dir::Etc::sourceparts=-",
               "-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::Cache={state / 'cache'}",
               "-o", "Debug::NoLocking=1"]
    if os.geteuid() == 0:  # else apt drops to user _apt, who cannot write into our private directories
        options += ["-o", "APT::Sandbox::User=root"]
    proc = subprocess.run(["apt-get", "-q", *options, *args], cwd=state, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise HexfuseError(f"apt-get {args[0]} failed: {tail}")


def fetch_headers(dest: Path | None = None) -> Path:
    """Download Debian's libonnxruntime-dev with apt-get and unpack its headers into the cache."""
    dest = dest or cache_dir()
    if _has_header(dest / "include"):
        return dest / "include"
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise HexfuseError(f"{tool} not found: set ORT_INCLUDE_DIR to ONNX Runtime's include directory instead")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ort-headers-", dir=dest) as tmp:
        state = Path(tmp)
        for sub in ("lists/partial", "cache/archives/partial"):
            (state / sub).mkdir(parents=True)
        (state / "sources.list").write_text(DEBIAN_SOURCE + "\n")
        _apt(["update"], state)
        _apt(["download", DEBIAN_PACKAGE], state)
        debs = sorted(state.glob(f"{DEBIAN_PACKAGE}_*.deb"))
        if not debs:
            raise HexfuseError(f"apt-get download {DEBIAN_PACKAGE} wrote no .deb")
        unpacked = state / "root"
        subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(unpacked)], check=True, capture_output=True)
        include = unpacked / "usr" / "include" / "onnxruntime"
        if not _has_header(include):
            raise HexfuseError(f"{debs[-1].name} holds no {HEADER}")
        staged = state / "include"
        shutil.copytree(include, staged)
        (staged / "SOURCE").write_text(f"{debs[-1].name} ({DEBIAN_SOURCE})\n")
        os.replace(staged, dest / "include")  # appears whole or not at all
    return dest / "include"


def main() -> int:
    try:
        found = find_headers() or fetch_headers()
    except HexfuseError as exc:
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return 1
    print(f"hexfuse: ONNX Runtime C API headers (API version {api_version(found)}) in {found}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
