"""What the benchmark scripts share to run and time things: timing, repeats, waiting, processes.

:mod:`report` holds what the scripts say (the machine, tables, markdown); this module
holds how they measure: one JSON line per measurement, a timed call and the median of
repeats, measurements taken in turn (warm-up first) or in alternating order, paired
ratios, a deadline, a frame-rate window over a collector, waiting for a condition or for
Ray's CPUs and processes to be free, a fresh Ray's environment for a child process, and
the frame ledger's check.

Only the standard library is imported at import time (Ray inside the functions that
need it), so ``benchmarks/faults.py`` and its row modules stay cheap to list, and a
Ray worker that unpickles a benchmark function imports nothing heavy through here.
The scripts run from the repository root as ``python benchmarks/NAME.py`` (the tools
as ``python benchmarks/tools/NAME.py``, which put ``benchmarks/`` on ``sys.path``), so
this module is importable as ``harness``.

Example:
    >>> paired_ratios([2.0, 4.0, 3.0], [1.0, 2.0, 2.0]).median_of_ratios
    2.0
    >>> [turn_order(["ours", "peer"], repeat) for repeat in range(3)]
    [['ours', 'peer'], ['peer', 'ours'], ['ours', 'peer']]
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
K = TypeVar("K")
#: This folder: the scripts' modules (``peers``, ``vector_envs``, ...) are imported from it by name.
BENCHMARKS = Path(__file__).resolve().parent

#: What the frames a collector collected went to; they add up to ``ledger["collected"]``.
LEDGER_PARTS = ("yielded", "dropped", "preempted", "lost", "discarded", "reset_steps")


def ledger_adds_up(ledger: Mapping[str, Any]) -> bool:
    """Whether a collector's frame ledger is balanced and its parts add up to what it collected."""
    return bool(ledger["balanced"]) and ledger["collected"] == sum(ledger[p] for p in LEDGER_PARTS)


# ---------------------------------------------------------------- output


def json_line(record: Mapping[str, Any]) -> None:
    """Prints ``record`` as one JSON line on stdout, flushed (a value JSON lacks as its ``str``)."""
    print(json.dumps(record, default=str), flush=True)


def stderr_log(name: str) -> Callable[[str], None]:
    """A ``log(msg)`` printing ``[name] msg`` to stderr: progress, kept off stdout's JSON lines."""

    def log(msg: str) -> None:
        print(f"[{name}] {msg}", file=sys.stderr, flush=True)

    return log


def failure_note(err: BaseException, log: Callable[[str], None]) -> str:
    """Logs the traceback; returns the note of an n/a measurement (a deadline's error first)."""
    log(traceback.format_exc())
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, TimeoutError):
        cause = cause.__cause__ or cause.__context__
    err = cause or err  # a deadline firing inside C code surfaces as another error
    return f"n/a: {type(err).__name__}: {err}"[:300]


# ---------------------------------------------------------------- timing


def seconds(call: Callable[..., Any], *args: Any) -> float:
    """Wall seconds of ``call(*args)``; its result is freed after the clock stops."""
    start = time.perf_counter()
    result = call(*args)
    elapsed = time.perf_counter() - start
    del result
    return elapsed


def median_seconds(call: Callable[[], Any], *, reps: int, warmup: int = 1) -> float:
    """Median wall seconds of ``call()`` over ``reps`` runs, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    return statistics.median(seconds(call) for _ in range(reps))


def turn_order(sides: Sequence[T], repeat: int) -> list[T]:
    """``sides`` in repeat ``repeat``'s order: as given in even repeats, reversed in odd ones.

    So that no side always runs first (on a cold machine) or after the same neighbour, and
    the machine's drift reaches every side alike.
    """
    return list(sides) if repeat % 2 == 0 else list(sides)[::-1]


def in_turn(
    measures: Mapping[K, Callable[[], float]],
    *,
    repeats: int,
    warmup: int = 1,
    alternate: bool = False,
) -> dict[K, list[float]]:
    """Each of ``measures`` once per repeat, one after the other, after ``warmup`` untimed rounds.

    Args:
        measures: name -> a call that measures once and returns its value (seconds, a rate).
        repeats: the rounds whose values are kept.
        warmup: rounds run first, in the same order, their values dropped.
        alternate: reverse the order in odd rounds (:func:`turn_order`); else always as given.

    Returns:
        name -> its ``repeats`` values, in round order (paired by index across names).
    """
    for _ in range(warmup):
        for measure in measures.values():
            measure()
    values: dict[K, list[float]] = {name: [] for name in measures}
    for repeat in range(repeats):
        for name in turn_order(list(measures), repeat) if alternate else measures:
            values[name].append(measures[name]())
    return values


@dataclass(frozen=True)
class Ratios:
    """Paired measurements ``a / b``: the ratio of the medians and the median of the ratios."""

    ratio_of_medians: float
    median_of_ratios: float
    low: float
    high: float


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> Ratios:
    """The ratios of ``a`` over ``b``, taken in pairs (the same repeat or seed for both).

    Raises:
        ValueError: ``a`` and ``b`` differ in length, or are empty.
    """
    if not a or len(a) != len(b):
        raise ValueError(f"paired_ratios needs two equally long lists, got {len(a)} and {len(b)}")
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return Ratios(
        statistics.median(a) / statistics.median(b), statistics.median(ratios),
        min(ratios), max(ratios),
    )  # fmt: skip


@contextlib.contextmanager
def deadline(timeout_s: float) -> Iterator[None]:
    """Raises TimeoutError in the main thread if the block runs past ``timeout_s``."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"measurement ran past {timeout_s:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def frames_in(batch: Any) -> int:
    """Frames in a batch: a numpy dict's ``reward`` entries (or the ``True`` ones of its
    ``mask``), a TensorDict's elements (those its ``("collector", "mask")`` marks valid, where
    it has one: padding is no frame).

    Both kinds of mask are counted by numpy, so that counting costs the consumer the same
    whichever collector it measures (torch's ``sum`` of a few thousand flags costs ~10x
    numpy's ``count_nonzero``: ~0.1 ms a batch, charged to one side's rate only).
    """
    if isinstance(batch, dict):
        mask = batch.get("mask")
        return int(batch["reward"].size) if mask is None else int(np.count_nonzero(mask))
    mask = batch.get(("collector", "mask"), None)
    return int(batch.numel()) if mask is None else int(np.count_nonzero(mask.numpy(force=True)))


def frames_per_s(it: Iterator[Any], *, frames: int, min_batches: int) -> float:
    """Frames/s of the batches of ``it`` over at least ``frames`` frames and ``min_batches``."""
    count = batches = 0
    start = time.perf_counter()
    while count < frames or batches < min_batches:
        count += frames_in(next(it))
        batches += 1
    return count / (time.perf_counter() - start)


# ---------------------------------------------------------------- waiting


def wait_until(condition: Callable[[], bool], timeout_s: float, *, poll_s: float = 0.05) -> bool:
    """Polls ``condition`` every ``poll_s`` until it holds; False if ``timeout_s`` passed first."""
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(poll_s)
    return True


def settle(timeout_s: float = 60.0) -> None:
    """Waits until every Ray CPU is free again (the last actors are gone), then a bit more."""
    import gc

    import ray

    gc.collect()
    total = ray.cluster_resources().get("CPU", 0)
    wait_until(lambda: ray.available_resources().get("CPU", 0) >= total, timeout_s, poll_s=0.1)
    time.sleep(0.2)  # killed actor processes may still be exiting


def actor_pid(actor: Any, timeout_s: float = 30.0) -> int:
    """The process id of a Ray actor."""
    import ray

    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=timeout_s)


# ---------------------------------------------------------------- processes


def tdscheme_executable() -> str:
    """The ``tdscheme`` command beside this Python (the venv's), else the one on ``PATH``."""
    exe = Path(sys.executable).with_name("tdscheme")
    return str(exe) if exe.exists() else "tdscheme"


def benchmarks_on_pythonpath() -> None:
    """Puts ``benchmarks/`` first on ``PYTHONPATH`` for the processes this one starts next.

    A local Ray started afterwards passes it to its workers, so that they import ``peers``,
    ``vector_envs`` or ``layout_worker`` by name, as a script's own Ray workers do: Ray gives
    them the driver script's folder, which for a tool is ``benchmarks/tools/``. Call it in
    a tool's ``main``, before Ray starts.
    """
    paths = [str(BENCHMARKS), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))


def fresh_ray_env(ray_tmpdir: str | os.PathLike[str], **extra: str) -> dict[str, str]:
    """This process's environment for a child that starts its own Ray under ``ray_tmpdir``.

    ``RAY_ADDRESS`` is left out, so that the child cannot join this process's Ray.
    """
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(ray_tmpdir), **extra)
    return env


@dataclass(frozen=True)
class Process:
    """One live process, as ``/proc`` shows it."""

    pid: int
    ppid: int
    state: str
    cmdline: str


def processes() -> list[Process]:
    """Every process ``/proc`` lists now (Linux), zombies included (``state == "Z"``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            found.append(
                Process(
                    int(entry.name), int(fields[1]), fields[0], cmdline.decode(errors="replace")
                )
            )
    return found


def pids_named(marker: str) -> list[str]:
    """The pids of the live (not zombie) processes whose command line holds ``marker``."""
    return [str(p.pid) for p in processes() if marker in p.cmdline and p.state != "Z"]


def processes_left(marker: str, *, within_s: float = 2.0) -> list[str]:
    """:func:`pids_named` ``marker`` once they had up to ``within_s`` to exit.

    For a child's Ray: ``marker`` is its ``RAY_TMPDIR``, which every one of its
    processes names; they get ``within_s`` to exit after the child did.
    """
    wait_until(lambda: not pids_named(marker), within_s, poll_s=0.2)
    return pids_named(marker)


def reap_children(timeout_s: float = 10.0) -> None:
    """Kills and waits for any process left as this one's child (the Ray of a run).

    In a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), what a run's driver
    leaves behind, such as Ray workers exiting after their raylet, is re-parented
    here. Call it when no other child of this process is running.
    """
    me, end = os.getpid(), time.monotonic() + timeout_s
    while time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        left = [p.pid for p in processes() if p.ppid == me]
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
