"""HVX kernel paths without the Hexagon SDK (DESIGN.md 6).

(a) clang-19 compiles the HVX sources (src/kernels/hvx/) for hexagon v73 with -Wall -Wextra -Werror, and
    syntax-checks the kernels that dispatch to them under __HVX__ (against the host's libstdc++ headers:
    there is no Hexagon C++ library without the SDK, and -fsyntax-only needs only declarations).
(b) the clang inside the `ziglang` wheel (part of the test extra) knows v75 and v79, which clang-19 does
    not: it compiles the HVX sources and, against its own libc++ / musl headers, the dispatching kernels
    for both, with -Werror.
(c) the freestanding driver tests/op_package/hexagon/hvx_check.c, linked with the HVX sources for v67,
    runs under qemu-hexagon-static and compares every routine with its scalar reference bit for bit; the
    quantized routines' constants come from the generation-time Python (hexagon/qcases.py).
Skips only when clang-19, qemu-hexagon-static or ziglang is missing. CI installs:
    apt-get install -y clang-19 lld-19 qemu-user-static     (and ziglang through pip install -e '.[test]')
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.op_package.hexagon.qcases import write_header

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "op_package" / "runtime"
HVX_SOURCES = sorted((RUNTIME / "src" / "kernels" / "hvx").glob("hvx_*.cpp"))
DISPATCHING = [RUNTIME / "src" / "kernels" / f"{name}.cpp" for name in ("elementwise", "layout", "logic", "qvector")]
DRIVER = Path(__file__).resolve().parent / "hexagon" / "hvx_check.c"
FLOAT_AND_BYTE_CASES = 4096  # printed by the driver; changes only when its tables change
LENGTHS_X_OFFSETS = 16 * 8  # kLengths x kOffsets of the driver: each quantized check runs once per pair

CLANG = shutil.which("clang-19")
CLANGXX = shutil.which("clang++-19") or CLANG
QEMU = shutil.which("qemu-hexagon-static")
WARN = ["-Wall", "-Wextra", "-Werror"]
HVX_FLAGS = ["-mhvx", "-mhvx-length=128b", "-O2"]
ZIG = [sys.executable, "-m", "ziglang", "c++"] if importlib.util.find_spec("ziglang") else None
NEWER_CPUS = ("v75", "v79")
needs_clang = pytest.mark.skipif(CLANG is None, reason="clang-19 not installed (apt-get install clang-19)")
needs_zig = pytest.mark.skipif(ZIG is None, reason="ziglang not installed (pip install ziglang; in the test extra)")


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and not proc.stderr.strip(), f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return proc


def _cxx(cpu: str) -> list[str]:
    return [CLANGXX, "-x", "c++", "--target=hexagon-unknown-none-elf", f"-mcpu=hexagon{cpu}", *HVX_FLAGS,
            "-ffreestanding", "-fno-exceptions", "-fno-rtti", "-std=c++17", *WARN, f"-I{RUNTIME / 'include'}"]


def _host_cxx_includes(shim: Path) -> list[str]:
    """g++'s own include search list (libstdc++ + glibc), minus gcc's builtin headers (clang has its own).
    glibc's headers pick the 32-bit stubs file for a 32-bit target; an empty one stands in."""
    proc = subprocess.run(["g++", "-x", "c++", "-E", "-v", "-"], input="", capture_output=True, text=True)
    listed = re.search(r"#include <\.\.\.> search starts here:\n(.*?)End of search list", proc.stderr, re.S)
    assert listed, proc.stderr
    dirs = [d.strip() for d in listed.group(1).splitlines() if d.strip() and "/gcc/" not in d]
    (shim / "gnu").mkdir(parents=True, exist_ok=True)
    (shim / "gnu" / "stubs-32.h").write_text("")
    return ["-nostdinc++", *(flag for d in [*dirs, str(shim)] for flag in ("-isystem", d))]


@needs_clang
@pytest.mark.parametrize("source", HVX_SOURCES, ids=lambda p: p.name)
def test_hvx_sources_compile_for_v73(source: Path, tmp_path: Path) -> None:
    _run([*_cxx("v73"), "-c", str(source), "-o", str(tmp_path / f"{source.stem}.o")])


@needs_clang
@pytest.mark.parametrize("source", DISPATCHING, ids=lambda p: p.name)
def test_dispatching_kernels_parse_with_hvx_for_v73(source: Path, tmp_path: Path) -> None:
    assert "__HVX__" in source.read_text()
    _run([CLANGXX, "--target=hexagon-unknown-linux-gnu", "-mcpu=hexagonv73", *HVX_FLAGS, "-std=c++17", *WARN,
          "-fsyntax-only", *_host_cxx_includes(tmp_path / "shim"), f"-I{RUNTIME / 'include'}", str(source)])


@needs_zig
@pytest.mark.parametrize("cpu", NEWER_CPUS)
def test_hvx_and_dispatching_sources_compile_for_newer_cpus(cpu: str, tmp_path: Path) -> None:
    # zig's driver ignores -mhvx / -mhvx-length: HVX goes in the CPU's feature list, else __HVX__ stays
    # undefined and the HVX paths compile out unseen (the probe below fails then)
    mcpu = f"-mcpu=hexagon{cpu}+hvx{cpu}+hvx_length128b"
    hvx = ["-O2", "-std=c++17", *WARN, f"-I{RUNTIME / 'include'}"]
    probe = tmp_path / "probe.cpp"
    probe.write_text("#if !defined(__HVX__) || __HVX_LENGTH__ != 128\n#error HVX-128 is not enabled\n#endif\n")
    commands = [[*ZIG, "-target", "hexagon-freestanding-none", mcpu, *hvx, "-ffreestanding",
                 "-fno-exceptions", "-fno-rtti", "-c", str(source), "-o", str(tmp_path / f"{source.stem}.o")]
                for source in (probe, *HVX_SOURCES)]
    commands += [[*ZIG, "-target", "hexagon-linux-musl", mcpu, *hvx, "-Wno-unused-command-line-argument",
                  "-c", str(source), "-o", str(tmp_path / f"{source.stem}.o")]  # zig's libc++ and musl stand in
                 for source in DISPATCHING]                                        # for the SDK's C++ library
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:  # independent compiles: every core
        list(pool.map(_run, commands))


@needs_clang
@pytest.mark.skipif(QEMU is None, reason="qemu-hexagon-static not installed (apt-get install qemu-user-static)")
def test_hvx_routines_match_scalar_under_qemu(tmp_path: Path) -> None:
    # The linker ships separately from clang on Debian (lld-19); without it this must fail, not skip.
    objects = [str(tmp_path / f"{source.stem}.o") for source in HVX_SOURCES]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(_run, ([*_cxx("v67"), "-c", str(source), "-o", obj] for source, obj in zip(HVX_SOURCES, objects))))
    exe = tmp_path / "hvx_check"
    quant_checks = write_header(tmp_path / "hvx_qcases.h")
    _run([CLANG, "-x", "c", "--target=hexagon-unknown-none-elf", "-mcpu=hexagonv67", *HVX_FLAGS, "-ffreestanding",
          "-std=c11", *WARN, f"-I{RUNTIME / 'include'}", f"-I{tmp_path}", "-nostdlib", "-fuse-ld=lld", str(DRIVER),
          "-x", "none", *objects, "-o", str(exe)])
    proc = subprocess.run([QEMU, "-cpu", "v67", str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = FLOAT_AND_BYTE_CASES + LENGTHS_X_OFFSETS * quant_checks
    assert proc.stdout.strip().splitlines()[-1] == f"hvx_check: {cases} cases, 0 mismatches", proc.stdout
