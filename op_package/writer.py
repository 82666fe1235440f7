"""Write a rendered file map to a directory atomically: build it beside DIR, then swap it in.

DIR is replaced only when it is empty or a tree hexfuse generated before (it holds the marker file
MARKER); anything else is refused, so `-o .` or `-o <the model's folder>` never deletes a file.
The staged tree is removed on any error or interrupt, and the swap (old tree aside, new tree in)
runs with SIGINT/SIGTERM held back, so DIR is always the old tree or the new one. A build step
(``before_swap``) runs on the staged tree, so a failed build leaves DIR as it was.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import signals_held, staging_folder


MARKER = ".hexfuse-oppkg"  # present in every generated tree
DEFAULT_PACKAGE = "HexFuse"  # the package name unless --package-name says otherwise


def _check_replaceable(out: Path, marker: str) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise HexfuseError(f"output {out} exists and is not a directory")
    try:
        empty = not any(out.iterdir())
    except OSError as exc:
        raise HexfuseError(f"cannot read output directory {out}: {exc.strerror}") from None
    if not empty and not (out / marker).is_file():
        raise HexfuseError(f"refusing to replace {out}: it is not empty and not an op package hexfuse generated "
                           f"(no {marker} file); choose a new or empty directory")


def write_tree(files: dict[str, str], out_dir: str | os.PathLike[str],
               before_swap: Callable[[Path], None] | None = None) -> Path:
    """Write ``files`` (which hold MARKER, see render.py) as the tree ``out_dir``. ``before_swap`` (e.g.
    a build) gets the staged tree's path; when it raises, the staged tree is removed and DIR untouched."""
    out = Path(out_dir).resolve()
    _check_replaceable(out, MARKER)
    try:
        stage = staging_folder(out)
    except OSError as exc:
        raise HexfuseError(f"cannot write op package to {out}: {exc.strerror}") from None
    old = None
    try:
        for rel, text in files.items():
            path = stage / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        if before_swap is not None:
            before_swap(stage)
        with signals_held():
            if out.exists():  # keep the previous tree until the new one is in place
                old = out.parent / f".{out.name}.old.{os.getpid()}"
                os.replace(out, old)
            try:
                os.replace(stage, out)
            except OSError:
                if old is not None:
                    os.replace(old, out)  # put the previous tree back
                    old = None
                raise
    except OSError as exc:
        raise HexfuseError(f"cannot write op package to {out}: {exc.strerror}") from None
    finally:
        with signals_held():  # an interrupt here would leave a hidden half-deleted tree
            shutil.rmtree(stage, ignore_errors=True)  # gone already when the swap succeeded
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    return out
