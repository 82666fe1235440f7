"""What kind of library ``--op-package`` names, read from its exported symbols (never loaded).

    QNN op package (HTP)      exports <Pkg>InterfaceProvider   (what the QNN EP's op_packages option wants)
    ORT custom-op library     exports RegisterCustomOps        (hexfuse oppkg --build ort: CPU baselines 3/4)
    hexfuse host build        exports hexfuse_run              (hexfuse oppkg --build host: ctypes tests only)

Loading a library to find out would run its constructors (and an HTP package needs libQnnHtp.so), so
the ELF dynamic symbol table is read directly: ELF32 and ELF64, either byte order. Windows DLLs are
not inspected (their registration failure still shows up as unclaimed fused nodes).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

HOST, ORT, QNN, UNKNOWN = "hexfuse host build", "ONNX Runtime custom-op library", "QNN op package", "unknown"
DLL = "Windows DLL"  # not inspected
_SHT_DYNSYM = 11


@dataclass(frozen=True)
class LibraryKind:
    kind: str
    providers: tuple[str, ...]  # <Pkg>InterfaceProvider symbols, for QNN packages

    @property
    def package_names(self) -> tuple[str, ...]:
        return tuple(p[: -len("InterfaceProvider")] for p in self.providers)


def exported_symbols(path: str | Path) -> set[str]:
    """Names of the defined global/weak symbols in an ELF shared library's .dynsym."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise HexfuseError(f"{path} is not an ELF shared library")
    wide, end = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        if wide:
            shoff, = struct.unpack_from(end + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        else:
            shoff, = struct.unpack_from(end + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        sections = []
        for i in range(shnum):
            at = shoff + i * shentsize
            if wide:
                _, stype, _, _, off, size, link, _, _, entsize = struct.unpack_from(end + "IIQQQQIIQQ", data, at)
            else:
                _, stype, _, _, off, size, link, _, _, entsize = struct.unpack_from(end + "IIIIIIIIII", data, at)
            sections.append((stype, off, size, link, entsize))
        names: set[str] = set()
        for stype, off, size, link, entsize in sections:
            if stype != _SHT_DYNSYM or not entsize:
                continue
            str_off = sections[link][1]
            for at in range(off, off + size, entsize):
                if wide:
                    name, info, _, shndx = struct.unpack_from(end + "IBBH", data, at)
                else:
                    name, _, _, info, _, shndx = struct.unpack_from(end + "IIIBBH", data, at)
                if shndx == 0 or (info >> 4) not in (1, 2):  # undefined, or local binding
                    continue
                stop = data.index(b"\0", str_off + name)
                names.add(data[str_off + name:stop].decode("utf-8", "replace"))
        return names
    except (struct.error, IndexError, ValueError):
        raise HexfuseError(f"{path}: unreadable ELF symbol table") from None


def library_kind(path: str | Path) -> LibraryKind:
    with open(path, "rb") as f:
        if f.read(2) == b"MZ":
            return LibraryKind(DLL, ())
    symbols = exported_symbols(path)
    providers = tuple(sorted(s for s in symbols if s.endswith("InterfaceProvider") and s != "InterfaceProvider"))
    if providers:
        return LibraryKind(QNN, providers)
    if "RegisterCustomOps" in symbols:
        return LibraryKind(ORT, ())
    if "hexfuse_run" in symbols:
        return LibraryKind(HOST, ())
    return LibraryKind(UNKNOWN, ())


def require_qnn_package(path: str, package: str) -> None:
    """--ep qnn: the library must be an HTP op package whose interface symbol names ``package``."""
    found = library_kind(path)
    if found.kind == DLL:
        return
    if found.kind == HOST:
        raise HexfuseError(f"{path} is a hexfuse host build (exports hexfuse_run, no {package}InterfaceProvider), "
                           "not a QNN HTP op package: build one with `hexfuse oppkg FUSED -o DIR --build htp_x86`")
    if found.kind == ORT:
        raise HexfuseError(f"{path} is an ONNX Runtime custom-op library (exports RegisterCustomOps), not a QNN HTP "
                           "op package: use it with --ep cpu")
    if found.kind == UNKNOWN:
        raise HexfuseError(f"{path} exports no *InterfaceProvider symbol: not a QNN op package")
    if package not in found.package_names:
        raise HexfuseError(f"{path} exports {', '.join(found.providers)}, not {package}InterfaceProvider: "
                           f"pass --op-package-name {found.package_names[0]}")


def require_ort_library(path: str) -> None:
    """--ep cpu: the library must register custom ops with ONNX Runtime."""
    found = library_kind(path)
    if found.kind in (ORT, DLL):
        return
    if found.kind == HOST:
        raise HexfuseError(f"{path} is a hexfuse host build (exports hexfuse_run), not an ONNX Runtime custom-op "
                           "library: build one with `hexfuse oppkg FUSED -o DIR --build ort`")
    if found.kind == QNN:
        raise HexfuseError(f"{path} is a QNN op package ({', '.join(found.providers)}): use it with --ep qnn; "
                           "for --ep cpu build `hexfuse oppkg FUSED -o DIR --build ort`")
    raise HexfuseError(f"{path} exports no RegisterCustomOps: not an ONNX Runtime custom-op library")
