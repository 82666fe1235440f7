"""Atomic file output: write a temporary file beside the target, then rename it into place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError


def write_atomic(path: Path, data: bytes) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise HexfuseError(f"{path}: output directory {directory} does not exist")
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise HexfuseError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        os.unlink(temporary)
        raise HexfuseError(f"{path}: cannot write: {exc.strerror}") from None
    except BaseException:
        os.unlink(temporary)
        raise
