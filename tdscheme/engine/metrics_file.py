"""``metrics.csv``: a run's scalars as ``step,name,value`` rows, appended, cut and read back.

The file every backend shares (:class:`~tdscheme.engine.run_log.RunLogger` writes it,
plots, the CLI and tests read it): opened for appending with its header
checked, a last row cut mid-write by a crash dropped, rows after a checkpoint's step
rewritten away atomically on resume.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from tdscheme.engine.atomic import atomic_write

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.csv"
HEADER = ["step", "name", "value"]


def read_metrics(run_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Reads back the scalars that :class:`RunLogger` wrote to ``run_dir/metrics.csv``.

    Rows that cannot be parsed, and a last row without its newline (still being
    written, or cut by a crash), are skipped with a warning.

    Args:
        run_dir: The run's directory.

    Returns:
        Metric names to ``(step, value)`` pairs, in the order they were logged.

    Raises:
        FileNotFoundError: If ``run_dir`` has no ``metrics.csv``.
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"run_dir {str(run_dir)!r} has no {METRICS_FILE} (looked for {path})"
        )
    text = path.read_text(encoding="utf-8")
    complete, _, partial = text.rpartition("\n")
    if partial:  # a row still being written, or cut by a crash: not a value yet
        logger.warning("ignoring the incomplete last row of %s: %r", path, partial)
    metrics: dict[str, list[tuple[int, float]]] = {}
    bad = 0
    reader = csv.reader(io.StringIO(complete))
    next(reader, None)
    for row in reader:
        try:
            if len(row) != 3:
                raise ValueError(f"{len(row)} columns")
            step, name, value = int(row[0]), row[1], float(row[2])
        except ValueError:
            bad += 1
            continue
        metrics.setdefault(name, []).append((step, value))
    if bad:
        logger.warning("skipped %d unreadable rows of %s", bad, path)
    return metrics


def open_metrics(path: Path) -> TextIO:
    """Opens ``metrics.csv`` for appending, writing the header to a new file."""
    existing = path.is_file() and path.stat().st_size > 0
    if existing:
        with open(path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), None)
        if header != HEADER:
            raise ValueError(
                f"{path} exists but is not a tdscheme metrics file: its header is {header}, "
                f"expected {HEADER}"
            )
        drop_incomplete_last_row(path)
    f = open(path, "a", newline="", encoding="utf-8")  # closed by RunLogger.close
    if not existing:
        csv.writer(f, lineterminator="\n").writerow(HEADER)
        f.flush()
    return f


def drop_incomplete_last_row(path: Path) -> None:
    """Cuts a last row without its newline: a crash stopped it mid-write (e.g. "23.5" as "23")."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 65536))  # rows are short: the last newline is near the end
        tail = f.read()
        end = size - len(tail) + tail.rfind(b"\n") + 1
        if end < size:
            logger.warning(
                "dropping the incomplete last row of %s: %r", path, tail[-(size - end) :]
            )
            f.truncate(end)


def rewrite_rows(path: Path, keep: Callable[[list[str]], bool], *, header: bool) -> int:
    """Atomically rewrites the csv at ``path`` with the rows ``keep`` accepts; counts the rest."""
    if not path.is_file():
        return 0
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    head, body = (rows[:1], rows[1:]) if header else ([], rows)
    kept = [row for row in body if row and keep(row)]
    if len(kept) == len(body):
        return 0
    with atomic_write(path) as f:
        csv.writer(f, lineterminator="\n").writerows(head + kept)
    return len(body) - len(kept)


def row_step(row: list[str]) -> float:
    try:
        return int(row[0])
    except (ValueError, IndexError):
        return math.inf  # unreadable rows are dropped too
