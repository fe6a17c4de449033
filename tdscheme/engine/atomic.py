"""atomic_write: the one way tdscheme replaces a file (checkpoints, run logs, JSON).

A temporary file in the same directory is written, flushed and fsynced, then
moved into place with :func:`os.replace` and the directory fsynced: a crash while
writing leaves the previous file intact, never a half-written one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["TMP_SUFFIX", "atomic_write", "fsync_dir", "write_text_atomic"]

#: The suffix of the temporary files (a leftover one marks a crash during a write).
TMP_SUFFIX = ".tmp"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, *, binary: bool = False) -> Iterator[IO[Any]]:
    """Opens a temporary file that replaces ``path`` when the ``with`` block succeeds.

    Args:
        path: the file to write; its directory must exist.
        binary: open in ``"wb"`` (``True``) or text ``"w"`` with UTF-8 and ``newline=""``.

    Yields:
        The open temporary file.

    Raises:
        FileNotFoundError: the directory of ``path`` does not exist.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     target = Path(d) / "a.json"
        ...     with atomic_write(target) as f:
        ...         _ = f.write("{}")
        ...     print(target.read_text(), sorted(p.name for p in Path(d).iterdir()))
        {} ['a.json']
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: directory {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        kwargs: dict[str, Any] = {} if binary else {"encoding": "utf-8", "newline": ""}
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Makes a rename in ``directory`` durable (not every platform can open a directory)."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Replaces ``path`` with ``text`` atomically."""
    with atomic_write(path) as f:
        f.write(text)
