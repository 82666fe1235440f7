"""File output that never leaves a mix of runs behind and never overwrites what a run reads.

    write_files([(model, b), (spec, b), (report, b)])
      0 folders the missing folders of the targets are made (and removed again, if still empty, when
                nothing is written): every command writes into a new folder the same way
      1 stage   every file as a temporary beside its target (same folder: the rename is atomic); each
                temporary is recorded for removal before a signal can land (mkstemp runs with them held)
      2 commit  rename them into place in the given order, SIGINT/SIGTERM deferred meanwhile, holding
                an exclusive lock on each target folder: two runs writing the same set commit one
                after the other, never interleaved (the last one's set wins whole)
      on any error or interrupt during 1, every temporary is removed and no target changes

A kill that cannot be caught (SIGKILL, power loss) between two renames can still leave a new model
beside an old spec: that is why the spec carries the model's hash (spec/model.py) and `hexfuse oppkg`
checks it. ``refuse_overwrite`` keeps the files a run writes apart from the files it reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

try:
    import fcntl
except ImportError:  # not POSIX: commits are not serialized between processes
    fcntl = None  # type: ignore[assignment]

_HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT/SIGTERM arriving inside the block take effect when it ends, as they would have.

    Python-level, not pthread_sigmask: a process-directed signal goes to any thread not blocking it
    (ONNX Runtime's and BLAS's threads), and Python runs handlers in the main thread regardless, so only
    swapping the handlers defers it reliably."""
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield
        return
    pending: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: pending.append(signum)) for signum in _HELD}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)  # handled now by whatever was in place before


def _stage(path: Path, data: bytes, staged: list[str]) -> None:
    """Write ``data`` to a new temporary beside ``path`` and append its name to ``staged`` (the caller
    removes what ``staged`` holds on failure). The temporary is in ``staged`` before a SIGINT/SIGTERM
    can interrupt: mkstemp and the bookkeeping run with both signals held."""
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise HexfuseError(f"{path}: is a directory")
    if path.exists() and not path.is_file():  # a FIFO or a device: the rename would replace the node itself
        raise HexfuseError(f"{path}: not a regular file, refusing to replace it")
    with signals_held():
        try:
            handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        except OSError as exc:
            raise HexfuseError(f"{path}: cannot write: {exc.strerror}") from None
        staged.append(temporary)
        stream = os.fdopen(handle, "wb")
    try:
        with stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
    except OSError as exc:
        raise HexfuseError(f"{path}: cannot write: {exc.strerror}") from None


@contextlib.contextmanager
def _folders_locked(paths: Iterable[Path]) -> Iterator[None]:
    """An exclusive flock on each folder (sorted: two runs never wait on each other in a cycle)."""
    handles = []
    try:
        for folder in sorted({os.path.abspath(Path(p).parent if str(Path(p).parent) else ".") for p in paths}):
            handle = os.open(folder, os.O_RDONLY)
            handles.append(handle)
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        for handle in handles:
            os.close(handle)  # closing releases the lock


def _folders_to_make(folder: Path) -> list[Path]:
    """``folder`` and its missing parents, innermost first; refuse a path through a file."""
    missing = []
    for path in (folder, *folder.parents):
        if path.exists():  # one look, then is_dir: a folder another run makes meanwhile is not "a file"
            if path.is_dir():
                return missing
            raise HexfuseError(f"output directory {folder}: {path} is not a directory")
        missing.append(path)
    return missing


@contextlib.contextmanager
def folders_made(paths: Iterable[Path]) -> Iterator[None]:
    """Make the missing folders of ``paths``; on an error or interrupt inside the block, remove again
    those of them that are still empty (innermost first)."""
    made: list[Path] = []
    try:
        for folder in dict.fromkeys(Path(p).parent for p in paths):
            missing = _folders_to_make(folder)
            for path in reversed(missing):
                try:
                    path.mkdir()
                except FileExistsError:
                    if not path.is_dir():
                        raise
                    continue  # another run made it in the meantime: it is not ours to remove
                made.append(path)
    except OSError as exc:
        _remove_empty(made)
        raise HexfuseError(f"cannot create output directory {exc.filename}: {exc.strerror}") from None
    except BaseException:
        _remove_empty(made)
        raise
    try:
        yield
    except BaseException:
        _remove_empty(made)
        raise


def _remove_empty(folders: list[Path]) -> None:
    for folder in reversed(folders):  # innermost first
        with contextlib.suppress(OSError):
            folder.rmdir()


def write_files(files: Sequence[tuple[Path, bytes]]) -> None:
    """Write every (path, data), each whole, all of them or (on an error or interrupt) none; missing
    folders are made (folders_made)."""
    with folders_made(Path(path) for path, _ in files):
        _write_files(files)


def _write_files(files: Sequence[tuple[Path, bytes]]) -> None:
    staged: list[str] = []
    renamed = 0
    try:
        for path, data in files:
            _stage(Path(path), data, staged)
        with signals_held(), _folders_locked(path for path, _ in files):
            for path, _ in files:
                os.replace(staged[renamed], path)
                renamed += 1
    except OSError as exc:
        raise HexfuseError(f"{files[renamed][0]}: cannot write: {exc.strerror}") from None
    finally:
        for temporary in staged[renamed:]:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def staging_folder(out: Path) -> Path:
    """A new hidden folder beside ``out`` to build a tree in before it is renamed to ``out``, with the
    mode mkdir would give it (mkdtemp's 0700 would stay with the renamed tree). Missing folders above
    ``out`` are made, as write_files makes them."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HexfuseError(f"cannot create output directory {exc.filename}: {exc.strerror}") from None
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    mask = os.umask(0)  # (reading the umask means setting it: set back at once)
    os.umask(mask)
    os.chmod(stage, 0o777 & ~mask)
    return stage


def write_atomic(path: Path, data: bytes) -> None:
    write_files([(Path(path), data)])


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes (as load/model.py hashes a model), read in blocks."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise HexfuseError(f"{path}: cannot read: {exc.strerror}") from None
    return digest.hexdigest()


def same_file(a: Path, b: Path) -> bool:
    """The two paths name one file: equal once resolved (symlinks, ``..``), or hard links of one inode."""
    try:
        if Path(a).resolve() == Path(b).resolve():
            return True
        return Path(a).exists() and Path(b).exists() and os.path.samefile(a, b)
    except OSError:
        return False


def refuse_overwrite(outputs: Iterable[Path], protected: Iterable[tuple[Path, str]]) -> None:
    """One line naming the first output that is a file the run reads or must keep.

    ``protected``: (path, what it is), e.g. (m.onnx, "the input model")."""
    kept = list(protected)
    for out in outputs:
        for path, what in kept:
            if same_file(out, path):
                raise HexfuseError(f"{out}: refusing to overwrite {what} ({path})")
