"""What a RayCollector's parts share: its settings, workers and counters, and ``stats()`` over them.

* :class:`CollectorParts`: the one small record each composed part of a
  :class:`~tdscheme.collectors.RayCollector` gets (the flow, the weight pusher, the
  remote calls, the state, the report) instead of reaching into the collector.
* :class:`CollectorStats`: the counters and timers beside the frame ledger.
* :class:`StatsReport`: ``RayCollector.stats()`` and ``counters()`` over them.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tdscheme.collectors.driver.ledger import FrameLedger
from tdscheme.episodes import FinishedEpisodes
from tdscheme.errors import WorkerError
from tdscheme.runtime.actor_pool import DIED

if TYPE_CHECKING:
    from tdscheme.collectors.driver.pool import WorkerPool
    from tdscheme.collectors.settings.config import RayCollectorConfig
    from tdscheme.transport import TensorDictCodec

#: The most written episodes kept for :meth:`CollectorStats.take_written_episodes`.
KEPT_EPISODES = 100_000

#: Seconds after which a ping round of ``counters()`` counts the workers that answered.
PING_ROUND_S = 1.0


@dataclasses.dataclass
class CollectorStats:
    """What a RayCollector has done so far: the frame ledger, and timers and counters beside it.

    Where frames went is read from the ledger, booked once per request
    (:class:`~tdscheme.collectors.driver.ledger.FrameLedger`): ``frames`` is its
    ``yielded`` column and ``frames_dropped``, ``frames_preempted``,
    ``frames_lost`` and ``frames_discarded`` are its other columns, so ``stats()``
    and the ledger cannot disagree. ``discarded`` has one meaning: asked of a worker,
    then thrown away by the driver (collected past ``total_frames``, not written past a
    request's budget, or in flight when an iteration stopped).

    Attributes:
        batches: batches yielded.
        frames_per_worker: frames yielded from each worker.
        frames_written_by_dead_workers: frames a worker wrote into the replay buffer
            just before it died (its reply lost, its record found in the buffer):
            counted in ``frames``, not lost.
        lag_counts: yielded batches (or worker parts of a sync batch) per policy lag.
        wait_s, dispatch_s, decode_s, weight_push_s: driver-side time blocked waiting for
            batches, submitting requests, decoding payloads, pushing weights.
        collect_s, encode_s: worker-side time stepping envs and encoding, summed over batches.
        bytes_received: payload bytes received from workers.
        dedup_keys: the ``("next", ...)`` keys that crossed folded (``dedup_obs``).
        weight_pushes: number of ``update_policy_weights_`` pushes.
        ledger: where every frame asked of a worker went, each request booked when
            sent and when resolved.
        hung: workers declared hung (no progress for ``worker_stall_timeout_s``).
        written_episodes: ``(return, length)`` of the episodes that ended in frames the
            workers wrote into the replay buffer, until :meth:`take_written_episodes` (the
            newest ``KEPT_EPISODES`` of them: a loop that never takes them holds no more).
    """

    batches: int = 0
    frames_per_worker: Counter = dataclasses.field(default_factory=Counter)
    frames_written_by_dead_workers: int = 0
    lag_counts: Counter = dataclasses.field(default_factory=Counter)
    wait_s: float = 0.0
    dispatch_s: float = 0.0
    decode_s: float = 0.0
    weight_push_s: float = 0.0
    collect_s: float = 0.0
    encode_s: float = 0.0
    bytes_received: int = 0
    dedup_keys: set = dataclasses.field(default_factory=set)
    weight_pushes: int = 0
    started_at: float | None = None
    ledger: FrameLedger = dataclasses.field(default_factory=FrameLedger)
    hung: int = 0
    written_episodes: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=KEPT_EPISODES)
    )

    def add_written_episodes(self, episodes: FinishedEpisodes) -> None:
        """Keeps the episodes a worker reported with a write, for :meth:`take_written_episodes`."""
        n = len(episodes.returns)
        columns = (episodes.lengths, episodes.tasks, episodes.versions)
        columns = [[None] * n if column is None else column for column in columns]
        self.written_episodes.extend(zip(episodes.returns, *columns, strict=True))

    def take_written_episodes(self) -> FinishedEpisodes:
        """The episodes that ended in frames written into the replay buffer: returns, lengths,
        and the env-config tasks and versions they ran.

        Each is returned once: those written since the last call (the newest
        100,000 of them, if more were written meanwhile). The driver never
        sees the frames its workers write; they report these with each write.
        Thread-safe (background collection adds to them meanwhile).

        Example:
            >>> stats = CollectorStats()
            >>> stats.add_written_episodes(FinishedEpisodes([2.0], [2.0]))
            >>> stats.add_written_episodes(FinishedEpisodes([4.0], None))
            >>> stats.take_written_episodes().returns, stats.take_written_episodes()
            ([2.0, 4.0], FinishedEpisodes(returns=[], lengths=None, tasks=None, versions=None))
        """
        taken = []
        while self.written_episodes:  # the background thread appends meanwhile
            taken.append(self.written_episodes.popleft())
        columns = [list(column) for column in zip(*taken, strict=True)] or [[]] * 4
        returns, *others = columns
        return FinishedEpisodes(returns, *(None if None in c or not c else c for c in others))

    @property
    def frames(self) -> int:
        """Frames yielded (or written into the replay buffer): the ledger's ``yielded``."""
        return self.ledger.yielded

    def start_clock(self) -> None:
        """Starts the frames-per-second clock at the first request."""
        if self.started_at is None:
            self.started_at = time.perf_counter()

    def as_dict(self) -> dict[str, Any]:
        """A plain, serializable snapshot (times in milliseconds)."""
        elapsed = time.perf_counter() - self.started_at if self.started_at is not None else 0.0
        lags = self.lag_counts
        seen = sum(lags.values())
        books = self.ledger.as_dict()
        return {
            "frames": books["yielded"],
            "batches": self.batches,
            "fps": books["yielded"] / elapsed if elapsed > 0 else 0.0,
            "elapsed_s": elapsed,
            "frames_per_worker": dict(sorted(self.frames_per_worker.items())),
            "frames_preempted": books["preempted"],
            "frames_lost": books["lost"],
            "frames_written_by_dead_workers": self.frames_written_by_dead_workers,
            "frames_dropped": books["dropped"],
            "frames_discarded": books["discarded"],
            "reset_steps": books["reset_steps"],
            "frames_held_back": books["held_back"],
            "policy_lag_max": max(lags) if lags else 0,
            "policy_lag_mean": sum(k * v for k, v in lags.items()) / seen if seen else 0.0,
            "policy_lag_counts": dict(sorted(lags.items())),
            "wait_ms": 1e3 * self.wait_s,
            "dispatch_ms": 1e3 * self.dispatch_s,
            "decode_ms": 1e3 * self.decode_s,
            "weight_push_ms": 1e3 * self.weight_push_s,
            "worker_collect_ms": 1e3 * self.collect_s,
            "worker_encode_ms": 1e3 * self.encode_s,
            "bytes_received": self.bytes_received,
            "dedup_keys": sorted(self.dedup_keys),
            "weight_pushes": self.weight_pushes,
            "workers_hung": self.hung,
            "ledger": books,
        }

    def report(
        self,
        workers: str,
        *,
        num_workers: int,
        workers_alive: int,
        total_frames: int,
        requested_frames_per_batch: int,
        **extra: Any,
    ) -> dict[str, Any]:
        """``RayCollector.stats()``: :meth:`as_dict`, torchrl's keys, then ``extra``.

        Args:
            workers: torchrl's view: ``"aggregate"`` (``worker_frames``, the sum),
                ``"per_worker"`` (``worker_<i>/frames``) or ``"both"``.
            num_workers, workers_alive: ``workers`` and ``workers_alive``.
            total_frames: the frame limit (``-1``: none, so no ``completed``).
            requested_frames_per_batch: torchrl's key of the same name.
            extra: tdscheme's keys the collector adds (versions, restarts, ...).

        Raises:
            ValueError: an unknown ``workers``.

        Example:
            >>> stats = CollectorStats()
            >>> stats.ledger.reset_(yielded=10)  # 10 frames yielded
            >>> out = stats.report("aggregate", num_workers=2, workers_alive=2, total_frames=10,
            ...                    requested_frames_per_batch=5)
            >>> out["completed"], out["worker_frames"], out["workers_alive"]
            (True, 0, 2)
        """
        if workers not in ("aggregate", "per_worker", "both"):
            raise ValueError(
                f"workers={workers!r} is invalid; accepted: 'aggregate', 'per_worker', 'both'"
            )
        out = self.as_dict()
        per_worker = [self.frames_per_worker.get(i, 0) for i in range(num_workers)]
        out.update(
            requested_frames_per_batch=requested_frames_per_batch,
            workers=num_workers,
            workers_alive=workers_alive,
        )
        if total_frames >= 0:
            out.update(total_frames=total_frames, completed=self.frames >= total_frames)
        if workers in ("aggregate", "both"):
            out["worker_frames"] = sum(per_worker)
        if workers in ("per_worker", "both"):
            out.update({f"worker_{i}/frames": frames for i, frames in enumerate(per_worker)})
        out.update(extra)
        return out


@dataclasses.dataclass
class CollectorParts:
    """A collector's settings, workers, counters and codec, and its "is it open" check.

    Attributes:
        config: the collector's settings.
        pool: its worker actors.
        stats: its frame ledger, counters and timers.
        codec: encodes weights and decodes batches.
        check_open: raises ``RuntimeError`` once the collector is shut down.
    """

    config: RayCollectorConfig
    pool: WorkerPool
    stats: CollectorStats
    codec: TensorDictCodec
    check_open: Callable[[], None]

    @property
    def num_workers(self) -> int:
        """The number of workers (grows with ``add_collectors``)."""
        return len(self.pool)


class StatsReport:
    """``RayCollector.stats()``: the counters, the workers' answers and versions, in one dict.

    Args:
        parts: the collector's shared parts.
        running_versions: worker id -> policy version of the last batch it delivered.
        background: the collector's background collection (its error re-raises here).
        is_closed: whether the collector is shut down (its workers are not pinged then).
    """

    def __init__(
        self,
        parts: CollectorParts,
        *,
        running_versions: Mapping[int, int],
        background: Any,
        is_closed: Callable[[], bool],
    ) -> None:
        self.parts = parts
        self.running_versions = running_versions
        self.background = background
        self.is_closed = is_closed
        self._alive: tuple[int | None, float] = (None, time.monotonic())  # last ping: count, when
        self._pings: tuple[list[Any], float] | None = None  # a ping round in flight: refs, sent

    def report(self, workers: str = "aggregate", *, timeout: float | None = 10.0) -> dict[str, Any]:
        """Counters and timers, torchrl's keys and tdscheme's, within ``timeout`` seconds.

        torchrl's keys: ``frames``, ``requested_frames_per_batch``,
        ``total_frames`` and ``completed`` (with a frame limit), ``workers``,
        ``workers_alive`` (workers that answered a ping within the timeout: a
        dead or hung worker never blocks the call) and ``worker_frames``; with
        ``workers="per_worker"`` (or ``"both"``), ``worker_<i>/frames`` instead.
        tdscheme's: fps, per-worker frames, policy lag, frames
        preempted/lost/dropped/discarded (the frame ledger's columns, and the
        ledger itself under ``"ledger"``), restarts, wait/dispatch/decode/
        weight-push ms, bytes received, the policy version each worker
        acknowledged (``worker_policy_versions``) and runs, ``fast_path``: per
        worker, ``True`` on tdscheme's lean rollout, else why torchrl's rollout runs, and
        the env configs: ``env_config_version`` (the newest pushed), per worker the version
        acknowledged (``worker_env_config_versions``) and the oldest its env copies ran at
        its latest batch (``worker_running_env_config_versions``), ``env_config_pushes``.

        Args:
            workers: ``"aggregate"``, ``"per_worker"`` or ``"both"`` (torchrl's).
            timeout: seconds to wait for the workers' pings (``None``: 10, where
                torchrl waits forever: every wait of tdscheme's is bounded).

        Raises:
            ValueError: an unknown ``workers``.
            RuntimeError: background collection stopped on an error.
        """
        alive = self._ping(10.0 if timeout is None else timeout)
        return self._report(workers, alive)

    def counters(self, *, alive_max_age_s: float = 10.0) -> dict[str, Any]:
        """:meth:`report` (``"aggregate"``) without ever waiting on the workers.

        For a per-step metric: the counters are the driver's own. ``workers_alive``
        is the count of the last ping round that settled (:meth:`report`'s, or every
        worker before any). When that count is older than ``alive_max_age_s`` seconds a
        new round is sent, and read at the next calls, never waited for: it settles once
        every worker answered, or :data:`PING_ROUND_S` after it was sent (a worker that
        has not answered by then counts as not alive).

        Raises:
            RuntimeError: background collection stopped on an error.
        """
        self._settle_pings()
        if self._pings is None and time.monotonic() - self._alive[1] >= alive_max_age_s:
            self._send_pings()
        alive = self._alive[0]
        if alive is None:
            alive = len(self.parts.pool.active_ids())
        return self._report("aggregate", alive)

    def _send_pings(self) -> None:
        if not self.is_closed():
            pool = self.parts.pool
            self._pings = ([pool.submit(i, "ping") for i in pool.active_ids()], time.monotonic())

    def _settle_pings(self) -> None:
        """Counts a ping round that every worker answered, or that is :data:`PING_ROUND_S` old."""
        if self._pings is None:
            return
        refs, sent = self._pings
        pool = self.parts.pool
        ready = pool.wait(refs, num_returns=len(refs), timeout_s=0) if not self.is_closed() else []
        if len(ready) < len(refs) and time.monotonic() - sent < PING_ROUND_S:
            return
        alive = 0
        for ref in ready:
            try:
                alive += pool.outcome(ref) is not DIED
            except WorkerError:  # its actor failed: not alive
                pass
        pool.forget(set(refs) - set(ready))
        self._pings, self._alive = None, (alive, time.monotonic())

    def _ping(self, timeout_s: float) -> int:
        """Workers answering a ping within ``timeout_s`` (none is pinged once closed)."""
        alive = 0
        if not self.is_closed():
            alive = sum(self.parts.pool.answering(timeout_s))
        self._alive = (alive, time.monotonic())
        return alive

    def _report(self, workers: str, alive: int) -> dict[str, Any]:
        self.background.raise_error()
        pool, config, num_workers = self.parts.pool, self.parts.config, self.parts.num_workers
        if not self.is_closed():
            pool.poll_acks()
            pool.env_configs.poll()  # a config a worker refused raises here, named
        return self.parts.stats.report(
            workers,
            num_workers=num_workers,
            workers_alive=alive,
            total_frames=config.total_frames,
            requested_frames_per_batch=config.frames_per_batch,
            policy_version=pool.version,
            worker_policy_versions=pool.acked_versions(),
            worker_running_versions=[self.running_versions.get(i, 0) for i in range(num_workers)],
            restarts=sum(pool.restarts()),
            restarts_per_worker=pool.restarts(),
            workers_retired=sorted(pool.retired),
            num_collectors=num_workers,
            fast_path=pool.fast_path(),
            env_config_version=pool.env_configs.version,
            worker_env_config_versions=pool.env_configs.acked_versions(),
            worker_running_env_config_versions=pool.env_configs.running_versions(),
            env_config_pushes=pool.env_configs.pushes,
            env_config_push_ms=1e3 * pool.env_configs.push_s,
        )
