"""What a collector worker is built from (:class:`WorkerSpec`) and what it returns (:class:`WorkerBatch`).

Both are small plain data: the driver keeps a worker's spec to rebuild it after a
death, and each ``CollectorWorker.collect`` call returns a batch record.

Example:
    >>> spec = WorkerSpec(create_env_fn=None, frames_per_batch=200)
    >>> spec.collector_class.__name__, spec.whole_trajectories
    ('LeanCollector', False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tdscheme.episodes import FinishedEpisodes
from tdscheme.rollout.lean import LeanCollector
from tdscheme.transport import Payload

__all__ = ["WorkerBatch", "WorkerSpec"]


@dataclasses.dataclass
class WorkerSpec:
    """Everything a worker is built from; small, so the driver keeps it to rebuild a dead worker.

    Attributes:
        create_env_fn: env factory (or an env) for this worker.
        policy: the policy object sent to the worker (``None`` with ``policy_factory``
            or for a random policy).
        policy_factory: builds the policy inside the worker instead.
        collector_class: the torchrl collector class the worker wraps (default:
            :class:`~tdscheme.rollout.lean.LeanCollector`, torchrl's ``Collector``
            with a leaner rollout over plain gymnasium envs).
        collector_kwargs: extra keyword arguments for ``collector_class``; they
            override tdscheme's defaults
            (:func:`~tdscheme.runtime.torchrl_names.default_collector_kwargs`).
        frames_per_batch: frames the worker returns per ``collect`` call.
        num_workers_per_collector: env copies handed to ``collector_class``.
        compress: the transport codec's ``compress`` argument.
        preemptible: step the collector one env step at a time so that a
            ``preempt`` request cuts a batch short at the next step boundary.
        replay_buffer: a client of a Ray-held torchrl replay buffer: the worker
            writes its stamped frames into it and returns only counts.
        max_policy_lag: with a replay buffer, frames collected with weights more
            than this many versions older than the newest the worker received
            are not written (they are dropped and counted).
        drop_nonfinite_frames: with a replay buffer, frames holding NaN or inf are
            not written (dropped and counted).
    """

    create_env_fn: Any
    policy: Any = None
    policy_factory: Callable[[], Any] | None = None
    collector_class: type = LeanCollector
    collector_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    frames_per_batch: int = 1000
    num_workers_per_collector: int = 1
    compress: bool | list[Any] = False
    preemptible: bool = False
    replay_buffer: Any = None
    max_policy_lag: int | None = None
    drop_nonfinite_frames: bool = False

    @property
    def whole_trajectories(self) -> bool:
        """Whether the collector yields whole trajectories (torchrl's ``trajs_per_batch``)."""
        return self.collector_kwargs.get("trajs_per_batch") is not None


@dataclasses.dataclass
class WorkerBatch:
    """What one ``collect`` call returns to the driver.

    Attributes:
        worker_id: the worker that collected it.
        batch_id: the request it answers.
        policy_version: weights version the frames were collected with.
        frames: number of valid frames (with a replay buffer: frames written).
        preempted: the batch was cut short by a preemption request.
        payload: the encoded TensorDict (``None`` when written to a replay buffer).
        collect_s: seconds spent stepping.
        encode_s: seconds spent encoding (or writing to the replay buffer).
        frames_discarded: frames collected but not written: past the request's
            frame budget, or a trajectory that did not fit in it.
        frames_dropped: frames not written because they were collected with
            weights more than ``max_policy_lag`` versions older than the newest.
        incarnation: the worker's restarts when it collected the batch (set by the driver).
        next_traj_id: the id the worker's collector gives its next trajectory (``None``
            when the collector does not say): a rebuilt worker starts from the largest.
        episodes: with a replay buffer, the episodes that ended in the frames written
            (their returns, as the driver reads them from a batch it receives).
    """

    worker_id: int
    batch_id: int
    policy_version: int
    frames: int
    preempted: bool
    payload: Payload | None
    collect_s: float
    encode_s: float
    frames_discarded: int = 0
    frames_dropped: int = 0
    incarnation: int = 0
    next_traj_id: int | None = None
    episodes: FinishedEpisodes | None = None
