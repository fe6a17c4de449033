"""The frame ledger: where every frame asked of a worker went, and trajectory ids past a restart.

Every request the driver sends is booked when it is sent (:meth:`FrameLedger.ask`)
with the frames it asks of the worker, and once more when it resolves
(:meth:`FrameLedger.resolve`), with where each of those frames went:

* ``yielded``: handed to the consumer (or written into the replay buffer);
* ``dropped``: collected with weights too stale (``max_policy_lag``);
* ``preempted``: not collected because a straggler was cut off;
* ``lost``: in flight on a worker that died or was declared hung;
* ``discarded``: collected past ``total_frames`` (the last batch cut to fit, or
  not written past a request's frame budget), or in flight when iteration stopped;
* ``reset_steps``: env steps that reset a copy of a one-call ``NEXT_STEP`` vector
  env instead of stepping it (no transition: padding in the batch);
* ``held_back``: collected by a worker that writes n-step returns and held there for
  the rewards after them (``replay_n_step``): ``n_steps`` steps per env, booked with
  the first batch of each worker's actor; never written if the actor stops.

So ``asked == yielded + dropped + preempted + lost + discarded + reset_steps +
held_back + in_flight``,
where ``in_flight`` is what the requests not resolved yet asked, and
``collected = asked - in_flight`` (the frames of the resolved requests) equals
the sum of the five columns. The two sides are booked apart: a resolution whose
columns do not add up to what its request asked, a request resolved twice (or
never asked), one asked twice, or one still open when the flow says none is
(:meth:`FrameLedger.settle`) is an imbalance: its frames are counted in
``unaccounted``, a warning names the worker and the batch, and ``balanced`` is
False.

What a request asks, case by case (:class:`~tdscheme.collectors.driver.flow.BatchFlow`):

* A request asks the worker's whole batch: ``frames_per_batch`` (per worker)
  rounded up to whole env steps, as torchrl rounds it (``CollectorWorker.batch_frames``,
  learned when the worker starts; a rebuilt worker keeps its spec and its size).
  With a replay buffer too: the request's frame budget bounds what is written,
  and what the worker steps past it is ``discarded``.
* A preempted straggler: what it collected goes as any reply's; the rest of its
  whole batch is ``preempted``.
* A batch too stale (``max_policy_lag``): ``dropped``, and its preempted rest
  ``preempted``; the request asked again (stacked order) is a new request.
* The last batch cut to fit ``total_frames``: what is kept is ``yielded``, the
  rest ``discarded``.
* A dead (or hung) worker's request: its whole ask is ``lost``; a request asked
  again of it or of another worker is a new request with its own ask.
* A worker killed after its replay write landed: the write's record (found in
  the buffer) resolves the request as its reply would have; never ``lost``.
* Whole trajectories (``trajs_per_batch``, or a collector whose batch size is not
  fixed): a reply's size is not known when asking, so the request asks a nominal
  ``frames_per_batch`` (capped by its budget) while in flight (and is ``lost``
  with it), and its resolution restates the ask to the frames its worker
  reported stepping (``asked=``): its columns must add up to those. A request
  resolved twice or never is still caught by its key.
* Stacked order: each worker's part of a batch is a request of its own.
* Requests in flight when iteration stops (``total_frames`` reached, an error,
  ``shutdown``): ``discarded``. A restored run (``load_state_dict``) starts the
  books over at its frames, all yielded, keeping the requests in flight.

The books also hold the run against its budget: an iteration that ends short of
``total_frames`` (not stopped) books the frames never asked as ``short``, with
the reason (whole env rows or trajectories left no room: see
:mod:`~tdscheme.collectors.driver.budget`). Short without a reason is an early
stop, and the ledger is not balanced: ``asked`` can add up while ``total_frames``
was never asked for.

Each batch also leaves a record of its provenance: worker id, restart count, batch
id, policy version and frames.

Example:
    >>> ledger = FrameLedger()
    >>> ledger.ask("a", 200, worker_id=0, batch_id=1)
    >>> ledger.ask("b", 200, worker_id=1, batch_id=1)
    >>> ledger.resolve("a", yielded=150, preempted=50)
    >>> ledger.as_dict()["collected"], ledger.in_flight, ledger.balanced()
    (200, 200, True)
    >>> ledger.resolve("b", lost=190)  # 10 frames of worker 1's request went nowhere
    >>> ledger.as_dict()["unaccounted"], ledger.balanced()
    (10, False)
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from collections.abc import Hashable
from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase

from tdscheme.keys import TRAJ_IDS_KEY

__all__ = ["BatchRecord", "FrameLedger", "TrajectoryIds"]

_COLUMNS = ("yielded", "dropped", "preempted", "lost", "discarded", "reset_steps", "held_back")

#: imbalances logged as warnings (later ones are only counted)
_WARN_LIMIT = 5

logger = logging.getLogger(__name__)


class BatchRecord(NamedTuple):
    """Where one worker batch came from and how many of its frames were yielded."""

    worker_id: int
    restarts: int
    batch_id: int
    policy_version: int
    frames: int


class _Open(NamedTuple):
    """A request asked and not resolved yet."""

    worker_id: int
    batch_id: int
    frames: int


@dataclasses.dataclass
class FrameLedger:
    """Frames asked of the workers and where they went (see the module docstring).

    Requests are booked by a key (any hashable unique per request: the flow uses
    its Ray future). Thread-safe: a background collection books while
    ``stats()`` reads.

    Attributes:
        asked: frames asked by every request booked (restated for whole trajectories).
        yielded, dropped, preempted, lost, discarded, reset_steps, held_back: the resolved frames, by
            destination.
        unaccounted: frames booked out of line (see the module docstring).
        records: the provenance of the last ``keep`` batches (newest last).
    """

    asked: int = 0
    yielded: int = 0
    dropped: int = 0
    preempted: int = 0
    lost: int = 0
    discarded: int = 0
    reset_steps: int = 0
    held_back: int = 0
    unaccounted: int = 0
    short: int = 0
    short_reason: str | None = None
    keep: int = 64
    records: deque = dataclasses.field(default_factory=deque)
    _open: dict[Hashable, _Open] = dataclasses.field(default_factory=dict, repr=False)
    _in_flight: int = 0
    _warnings: int = 0
    _lock: threading.Lock = dataclasses.field(
        default_factory=threading.Lock, repr=False, compare=False
    )

    @property
    def in_flight(self) -> int:
        """Frames asked by the requests not resolved yet."""
        return self._in_flight

    def requests_in_flight(self) -> dict[Hashable, int]:
        """The requests not resolved yet: key -> frames asked."""
        with self._lock:
            return {key: entry.frames for key, entry in self._open.items()}

    def ask(self, key: Hashable, frames: int, *, worker_id: int = -1, batch_id: int = -1) -> None:
        """Books a request sent: ``frames`` asked of ``worker_id`` for batch ``batch_id``."""
        with self._lock:
            old = self._open.pop(key, None)
            if old is not None:  # its first ask can no longer resolve
                self._in_flight -= old.frames
                self._imbalance(
                    old, old.frames, f"asked twice ({old.frames}, then {frames} frames)"
                )
            self._open[key] = _Open(worker_id, batch_id, frames)
            self.asked += frames
            self._in_flight += frames

    def resolve(
        self,
        key: Hashable,
        *,
        asked: int | None = None,
        worker_id: int = -1,
        batch_id: int = -1,
        **frames: int,
    ) -> None:
        """Books how the frames of request ``key`` ended, column by column.

        Args:
            key: the request's key, as asked.
            asked: restates what the request asked, when its size was not known
                when asking (whole trajectories): the frames its worker stepped.
            worker_id, batch_id: name the request in the warning when ``key`` is
                not in flight.
            frames: frames per column (``yielded=...``, ``lost=...``); they must
                add up to what the request asked.

        Raises:
            KeyError: an unknown column.
        """
        for column in frames:
            if column not in _COLUMNS:
                raise KeyError(f"unknown ledger column {column!r}; known: {_COLUMNS}")
        booked = sum(frames.values())
        with self._lock:
            for column, count in frames.items():
                setattr(self, column, getattr(self, column) + count)
            entry = self._open.pop(key, None)
            if entry is None:
                what = f"resolved as {frames}, not in flight (resolved twice, or never asked)"
                self._imbalance(_Open(worker_id, batch_id, 0), booked, what)
                return
            self._in_flight -= entry.frames
            if asked is not None:
                self.asked += asked - entry.frames
                entry = entry._replace(frames=asked)
            if booked != entry.frames:
                what = f"asked {entry.frames} frames, resolved as {frames}"
                self._imbalance(entry, abs(booked - entry.frames), what)

    def settle(self) -> None:
        """Closes the books of an iteration that holds no request any more.

        A request still open here was never resolved: its frames are unaccounted.
        """
        with self._lock:
            for entry in self._open.values():
                self._in_flight -= entry.frames
                self._imbalance(entry, entry.frames, f"asked {entry.frames} frames, never resolved")
            self._open.clear()

    def reset_(self, yielded: int = 0) -> None:
        """Starts the books over at ``yielded`` frames, all yielded (a restored run).

        The requests in flight stay open: they resolve into the new books.
        """
        with self._lock:
            for column in (*_COLUMNS, "unaccounted", "short"):
                setattr(self, column, 0)
            self.short_reason = None
            self.yielded = yielded
            self.asked = yielded + self._in_flight

    def end_short(self, frames: int, reason: str | None) -> None:
        """Books an iteration that ended ``frames`` short of ``total_frames``, and why.

        ``reason=None``: an early stop with no cause; the books are then not balanced.

        Example:
            >>> ledger = FrameLedger()
            >>> ledger.end_short(200, "the next whole trajectory did not fit")
            >>> ledger.balanced(), ledger.as_dict()["short"]
            (True, 200)
            >>> ledger.end_short(875, None)
            >>> ledger.balanced(), ledger.as_dict()["short_reason"]
            (False, None)
        """
        with self._lock:
            self.short, self.short_reason = frames, reason

    def _imbalance(self, entry: _Open, frames: int, what: str) -> None:
        """Counts ``frames`` booked out of line; warns (the first ``_WARN_LIMIT`` times)."""
        self.unaccounted += frames
        self._warnings += 1
        if self._warnings <= _WARN_LIMIT:
            logger.warning(
                "frame ledger: worker %d batch %d %s: %d frames unaccounted%s",
                entry.worker_id, entry.batch_id, what, frames,
                "" if self._warnings < _WARN_LIMIT else " (further imbalances are only counted)",
            )  # fmt: skip

    def record(self, record: BatchRecord) -> None:
        """Keeps the provenance of a yielded batch (the last ``keep`` ones)."""
        with self._lock:
            self.records.append(record)
            while len(self.records) > self.keep:
                self.records.popleft()

    def balanced(self) -> bool:
        """Nothing unaccounted, and ``asked - in_flight == yielded + ... + discarded``."""
        with self._lock:
            return self._balanced()

    def _balanced(self) -> bool:
        resolved = sum(getattr(self, column) for column in _COLUMNS)
        early_stop = self.short > 0 and self.short_reason is None
        return not early_stop and self.unaccounted == 0 and self.asked - self._in_flight == resolved

    def as_dict(self) -> dict[str, Any]:
        """``asked``, ``in_flight``, ``collected``, the columns, ``unaccounted``, ``short``
        (and ``short_reason``), ``balanced``."""
        with self._lock:
            out: dict[str, Any] = {
                "asked": self.asked,
                "in_flight": self._in_flight,
                "collected": self.asked - self._in_flight,
            }
            out.update({column: getattr(self, column) for column in _COLUMNS})
            out["unaccounted"] = self.unaccounted
            out["short"], out["short_reason"] = self.short, self.short_reason
            out["balanced"] = self._balanced()
        return out


class TrajectoryIds:
    """Keeps a restarted worker's trajectory ids apart from its earlier actors'.

    A rebuilt worker's trajectories must never be spliced with the old ones (SEED
    RL's rule). A worker over torchrl's single-process ``Collector`` already counts
    on past its predecessor's ids (``CollectorWorker(first_traj_id=...)``, which
    also covers the frames it writes into a Ray-held buffer itself); any other
    collector counts from 0 again. So a new actor's ids are shifted, where
    needed, past the largest id the worker yielded before: ids stay distinct per
    worker and keep increasing.

    Example:
        >>> from tensordict import TensorDict
        >>> ids = TrajectoryIds()
        >>> td = lambda v: TensorDict({TRAJ_IDS_KEY: torch.tensor(v)}, batch_size=[len(v)])
        >>> ids.shift_(td([0, 0, 1]), worker_id=0, restarts=0)[TRAJ_IDS_KEY].tolist()
        [0, 0, 1]
        >>> ids.shift_(td([0, 1]), worker_id=0, restarts=1)[TRAJ_IDS_KEY].tolist()
        [2, 3]
        >>> ids.shift_(td([9, 9]), worker_id=0, restarts=2)[TRAJ_IDS_KEY].tolist()  # past: kept
        [9, 9]
    """

    def __init__(self) -> None:
        self._largest: dict[int, int] = {}  # worker -> largest id yielded (shifted)
        self._offsets: dict[tuple[int, int], int] = {}  # (worker, restarts) -> shift

    def shift_(self, td: TensorDictBase, worker_id: int, restarts: int) -> TensorDictBase:
        """Shifts ``td``'s trajectory ids in place (when it has them); returns it."""
        ids = td.get(TRAJ_IDS_KEY, None)
        if ids is None or ids.numel() == 0:
            return td
        key = (worker_id, restarts)
        if key not in self._offsets:  # from the actor's first batch: shift only if needed
            first = int(ids[ids >= 0].min()) if bool((ids >= 0).any()) else 0
            past = self._largest.get(worker_id, -1) + 1
            self._offsets[key] = 0 if restarts == 0 else max(0, past - first)
        offset = self._offsets[key]
        if offset:
            ids = torch.where(ids >= 0, ids + offset, ids)  # -1: padding, not a trajectory
            td.set(TRAJ_IDS_KEY, ids)
        largest = int(ids.numpy(force=True).max())  # numpy's: a tenth of torch's on a batch
        self._largest[worker_id] = max(self._largest.get(worker_id, -1), largest)
        return td
