"""The device build compiles: every generated source of a package, for Hexagon v73, v75 and v79, with the
generated Makefile's own device flags (HEXAGON_FLAGS: -O2 -mhvx -mhvx-length=128B -G0 -DUSE_OS_QURT
-DPREPARE_DISABLED ...), the way `make htp_v75` does in a bundle (issue 44).

Two packages: the bundled gptj_block_qdq and a merged model (`hexfuse merge` of the llama prefill and
decode requests), both fused as designed. `make htp_<v>_objects` compiles every object of the device
library; the test then checks that each generated source outside the host-only parts became a 32-bit
Hexagon object (nothing skipped).

Needs the QNN headers (QNN_SDK_ROOT; the proprietary SDK, or public headers of an older release as
/work/shared/qnn-sim.md says) and a Hexagon C++ compiler: the Hexagon SDK's hexagon-clang++
(HEXAGON_SDK_ROOT; then the Makefile runs unchanged), else the clang inside the `ziglang` wheel (test
extra) through a small driver that spells the Makefile's CPU flags the way zig wants them (docs/device.md).
Skipped with the reason otherwise: CI has no QNN headers.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hexfuse.cli import main as hexfuse_main

ROOT = Path(__file__).resolve().parents[2]
CPUS = ("v73", "v75", "v79")
PACKAGE = "HexFuseDevice"
EM_HEXAGON = 164  # ELF e_machine of Qualcomm Hexagon (QDSP6)
# Sources the Makefile keeps out of the HTP builds by design (host executor, our matrix kernels, the
# whole-op plans, the host C ABI and the ONNX Runtime custom ops).
HOST_ONLY = ("src/host/", "src/ort/", "src/fused/", "src/kernels/matrix/", "src/runtime/executor.cpp")


def _qnn_include() -> Path | None:
    root = os.environ.get("QNN_SDK_ROOT")
    include = Path(root) / "include" / "QNN" if root else None
    return include if include and (include / "HTP" / "core" / "optimize.h").is_file() else None


def _sdk_compiler() -> str | None:
    root = os.environ.get("HEXAGON_SDK_ROOT")
    found = sorted(glob.glob(f"{root}/tools/HEXAGON_Tools/*/Tools/bin/hexagon-clang++")) if root else []
    return found[-1] if found else None


def _missing() -> str | None:
    if _qnn_include() is None:
        return "no QNN HTP headers (QNN_SDK_ROOT/include/QNN/HTP/core/optimize.h): the Qualcomm SDK is proprietary"
    if _sdk_compiler() is None and importlib.util.find_spec("ziglang") is None:
        return "no Hexagon C++ compiler: neither HEXAGON_SDK_ROOT's hexagon-clang++ nor ziglang (pip install ziglang)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

# zig's clang driver ignores -mhvx / -mhvx-length (no __HVX__, so the SDK headers lose HVX_Vector) and
# knows the CPU as a zig target: the Makefile's -mv75 -mhvx -mhvx-length=128B become
# -mcpu=hexagonv75+hvxv75+hvx_length128b. Everything else passes through unchanged.
_ZIG_DRIVER = '''#!{python}
import os, sys
args = sys.argv[1:]
cpu = next(a[2:] for a in args if a.startswith("-mv") and a[3:].isdigit())
args = [a for a in args if a not in ("-mhvx", "-m" + cpu) and not a.startswith("-mhvx-length=")]
os.execv({python!r}, [{python!r}, "-m", "ziglang", "c++", "-target", "hexagon-linux-musl",
                      "-mcpu=hexagon%s+hvx%s+hvx_length128b" % (cpu, cpu), *args])
'''


def _toolchain(tmp: Path) -> Path:
    """The folder the Makefile's HEXAGON_TOOLS names: the SDK's, or one holding the zig driver."""
    sdk = _sdk_compiler()
    if sdk:
        return Path(sdk).parent
    tools = tmp / "zig-hexagon"
    tools.mkdir(exist_ok=True)
    driver = tools / "hexagon-clang++"
    driver.write_text(_ZIG_DRIVER.format(python=sys.executable))
    driver.chmod(driver.stat().st_mode | stat.S_IXUSR)
    return tools


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("device_compile")
    merged = work / "llama_merged.onnx"
    assert hexfuse_main(["merge", str(ROOT / "models" / "llama_prefill_qdq.onnx"),
                         str(ROOT / "models" / "llama_decode_qdq.onnx"), "-o", str(merged)]) == 0
    out = {}
    for name, model in (("gptj_block_qdq", ROOT / "models" / "gptj_block_qdq.onnx"), ("merged", merged)):
        fused = work / f"{name}.fused.onnx"
        assert hexfuse_main(["fuse", str(model), "-o", str(fused), "--as-designed", "--no-verify"]) == 0
        assert hexfuse_main(["oppkg", str(fused), "-o", str(work / name), "--package-name", PACKAGE]) == 0
        out[name] = work / name
    return out


def _device_sources(pkg: Path) -> set[str]:
    sources = {p.relative_to(pkg).as_posix() for p in (pkg / "src").rglob("*.cpp")}
    return {s for s in sources if not s.startswith(HOST_ONLY)}


def _is_hexagon_object(path: Path) -> bool:
    head = path.read_bytes()[:20]
    return head[:4] == b"\x7fELF" and head[4] == 1 and int.from_bytes(head[18:20], "little") == EM_HEXAGON


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("model", ("gptj_block_qdq", "merged"))
def test_every_generated_source_compiles_for_hexagon(packages: dict[str, Path], model: str, cpu: str,
                                                     tmp_path: Path) -> None:
    pkg = packages[model]
    sources = _device_sources(pkg)
    assert any(s.startswith("src/ops/") for s in sources) and any(s.startswith("src/tasks/") for s in sources)
    cmd = ["make", "-C", str(pkg), f"htp_{cpu}_objects", "-k", "-j2",
           f"QNN_SDK_ROOT={os.environ['QNN_SDK_ROOT']}", f"HEXAGON_TOOLS={_toolchain(tmp_path)}"]
    if not _sdk_compiler():  # no SDK: its qurt/posix include folders do not exist (and are not needed)
        cmd.append(f"HEXAGON_SDK_ROOT={tmp_path / 'no-hexagon-sdk'}")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 0, "\n".join(errors[:20]) or done.stderr[-3000:]
    assert "-DPREPARE_DISABLED" in done.stdout and f"-m{cpu}" in done.stdout  # the Makefile's own device flags
    objects = pkg / "build" / f"hexagon-{cpu}" / "obj"
    built = {"src/" + p.relative_to(objects).with_suffix(".cpp").as_posix() for p in objects.rglob("*.o")}
    assert built == sources, f"not compiled: {sorted(sources - built)}; unexpected: {sorted(built - sources)}"
    assert all(_is_hexagon_object(p) for p in objects.rglob("*.o"))
