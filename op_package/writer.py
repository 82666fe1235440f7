"""Write a rendered file map to a directory atomically: build it beside DIR, then swap it in."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError


def write_tree(files: dict[str, str], out_dir: str | os.PathLike[str]) -> Path:
    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not out.is_dir():
        raise HexfuseError(f"output {out} exists and is not a directory")
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for rel, text in files.items():
            path = stage / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        old = None
        if out.exists():  # keep the previous tree until the new one is in place
            old = out.parent / f".{out.name}.old.{os.getpid()}"
            os.replace(out, old)
        os.replace(stage, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise HexfuseError(f"cannot write op package to {out}: {exc.strerror}") from None
    return out
