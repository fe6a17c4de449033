"""What a collector worker writes into a replay buffer: flat frames, within a frame budget.

With a replay buffer, each worker writes its stamped batch into the buffer itself
(torchrl's Ray-held buffers give every worker a client) and returns only counts.
The driver hands each request a frame budget so that no frame is written past
``total_frames``: a plain batch is cut to the budget; with ``trajs_per_batch``
only whole trajectories are written, and a trajectory that does not fit is
discarded (and counted), never cut.

A batch is written in one ``extend``, so a worker that dies never leaves part of a
batch (or of a trajectory) in the buffer. A worker may die after its write landed but
before its reply reached the driver; so the write and a record of it (the reply it was
about to send) land together, in one call on the buffer's actor, and the driver asks
for the record of a worker that died (:func:`last_write`): a batch in the buffer is
counted as written, never as lost, and never asked again. (torchrl's ``"distributed"``
transport writes through its own client, without the record: there a death in that
window counts the written batch as lost.)
"""

from __future__ import annotations

from typing import Any

import ray
import torch
from ray.exceptions import RayActorError
from tensordict import TensorDictBase

from tdscheme.finite import bad_frames
from tdscheme.transport import Payload, TensorDictCodec

__all__ = [
    "BufferWriter",
    "ReplayBufferDied",
    "buffer_died",
    "frames_to_write",
    "is_ray_replay_buffer",
    "last_write",
    "trajectory_lengths",
    "without_nonfinite",
]

#: the attribute of the buffer (in its actor) that holds each worker's last write record
_RECORDS = "_tdscheme_last_writes"

#: seconds a write may take before the buffer is taken for dead
WRITE_TIMEOUT_S = 120.0


class ReplayBufferDied(RuntimeError):
    """The actor of a Ray-held replay buffer died (its frames went with it).

    A worker that meets it is not rebuilt (a new worker would write into the same
    dead actor): the driver raises it at once, as a ``WorkerError`` naming it.
    """


def buffer_died(call: str, err: Exception) -> ReplayBufferDied:
    """The error for a buffer actor found dead during ``call`` (``err``: Ray's)."""
    return ReplayBufferDied(
        f"the replay buffer's actor died (during {call}); its frames went with it. Resume "
        f"from the last checkpoint (checkpoint_replay_buffer=True keeps the buffer in it). "
        f"Ray: {str(err).splitlines()[0]}"
    )


def is_ray_replay_buffer(buffer: object) -> bool:
    """Whether ``buffer`` is a Ray-held torchrl buffer that remote workers can write into.

    torchrl's rule: ``RayReplayBuffer`` or ``ReplayBuffer(..., service_backend="ray")``,
    which hand out clients.
    """
    return getattr(buffer, "service_backend", None) == "ray" and callable(
        getattr(buffer, "client", None)
    )


def trajectory_lengths(td: TensorDictBase) -> list[int]:
    """The lengths of the trajectories of a flat batch of whole trajectories (``done`` ends each).

    Example:
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> trajectory_lengths(TensorDict({"next": {"done": done}}, [5]))
        [2, 3]
    """
    done = td.get(("next", "done")).reshape(td.shape[0], -1).any(-1)
    ends = (torch.nonzero(done).flatten() + 1).tolist()
    return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def frames_to_write(
    td: TensorDictBase, max_frames: int | None, *, whole_trajectories: bool, storage_ndim: int = 1
) -> tuple[TensorDictBase, int]:
    """The frames of a batch to write within ``max_frames``; and how many are discarded.

    The batch keeps torchrl's layout (what torchrl's collectors write: ``[*env_batch,
    time]``, or flat whole trajectories), so a buffer configured for torchrl's
    ``RayCollector`` fills the same way.

    Args:
        td: a stamped batch.
        max_frames: the request's budget (``None``: no budget).
        whole_trajectories: ``td`` is a flat batch of whole trajectories
            (``trajs_per_batch``): keep the longest prefix of whole trajectories
            that fits, never part of one. Otherwise the batch is cut so that what
            is written keeps the shape the buffer's storage holds: along its
            first dim for a storage of ``ndim=1`` (time for one env; the env rows
            of a ``[num_envs, time]`` batch), along time for ``ndim=2`` (torchrl's
            ``LazyTensorStorage(size, ndim=2)`` keeps the env dim and extends along time).
        storage_ndim: the ``ndim`` of the buffer's storage.

    Returns:
        ``(frames, discarded)``: the frames to write and the count left out.

    Example:
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> td = TensorDict({"next": {"done": done}}, [5])
        >>> kept, discarded = frames_to_write(td, 4, whole_trajectories=True)
        >>> kept.shape, discarded
        (torch.Size([2]), 3)
        >>> batched = TensorDict({"x": torch.zeros(3, 10)}, [3, 10])  # 3 envs, 10 steps
        >>> kept, discarded = frames_to_write(batched, 25, whole_trajectories=False)
        >>> kept.shape, discarded
        (torch.Size([2, 10]), 10)
        >>> kept, discarded = frames_to_write(batched, 25, whole_trajectories=False, storage_ndim=2)
        >>> kept.shape, discarded
        (torch.Size([3, 8]), 6)
    """
    total = td.batch_size.numel()
    if max_frames is None or max_frames >= total:
        return td, 0
    keep = max(0, max_frames)
    if whole_trajectories:
        kept = 0
        for length in trajectory_lengths(td):
            if kept + length > keep:
                break
            kept += length
        return td[:kept], total - kept
    if storage_ndim >= 2 and td.ndim >= 2:  # [num_envs, time] into [time, num_envs] rows
        per_step = total // td.shape[-1]
        out = td[..., : keep // per_step]
    else:
        per_row = total // td.shape[0]  # 1 for one env's [time]; time for [num_envs, time]
        out = td[: keep // per_row]
    return out, total - out.batch_size.numel()


def without_nonfinite(
    td: TensorDictBase, *, whole_trajectories: bool, storage_ndim: int = 1
) -> tuple[TensorDictBase, int]:
    """``td`` without the frames holding NaN or inf, in the units the storage writes; and the count.

    A flat batch loses the bad frames themselves; a flat batch of whole
    trajectories loses each trajectory holding one (never a cut trajectory); a
    ``[num_envs, time]`` batch loses the env rows holding one (``storage_ndim=1``)
    or the env steps holding one (``storage_ndim=2``).

    Example:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"r": torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, 6.0]])}, [2, 3])
        >>> kept, dropped = without_nonfinite(td, whole_trajectories=False)
        >>> kept["r"].tolist(), dropped
        ([[4.0, 5.0, 6.0]], 3)
        >>> kept, dropped = without_nonfinite(td, whole_trajectories=False, storage_ndim=2)
        >>> kept["r"].tolist(), dropped
        ([[1.0, 3.0], [4.0, 6.0]], 2)
    """
    bad = bad_frames(td)
    if not bool(bad.any()):
        return td, 0
    total = td.batch_size.numel()
    if td.ndim >= 2:
        keep = ~bad.any(0) if storage_ndim >= 2 else ~bad.reshape(td.shape[0], -1).any(-1)
        kept = td[..., keep] if storage_ndim >= 2 else td[keep]
    elif whole_trajectories:
        lengths = trajectory_lengths(td)
        traj = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
        bad_traj = torch.zeros(len(lengths), dtype=torch.bool).index_put_(
            (traj,), bad, accumulate=True
        )
        kept = td[~bad_traj[traj]]
    else:
        kept = td[~bad]
    return kept, total - kept.batch_size.numel()


class BufferWriter:
    """Writes a worker's frames into a Ray-held torchrl buffer through its client.

    torchrl's ``"ray"`` transport (the default) pickles the TensorDict for every
    ``extend``; with tdscheme's codec (one numpy buffer per leaf, sent out of band) a
    1,024-frame write is 2-2.5x faster (benchmarks/replay.py, section ``buffer``). So
    for that transport the batch is encoded here and decoded inside the buffer's
    actor, where the buffer's own ``extend`` writes it (Ray's ``__ray_call__`` runs a
    function on the actor): torchrl's storage, sampler and writer do the rest, as
    for any client write. Other transports (torchrl's ``"distributed"``) write
    through the client itself.

    Args:
        client: a client of the buffer (``RayReplayBuffer.client()``).
        timeout_s: the longest a write may take (a dead buffer is an error, not a hang).
    """

    def __init__(self, client: Any, timeout_s: float = WRITE_TIMEOUT_S) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._actor = _plain_ray_actor(client)
        self._codec = TensorDictCodec()
        self._storage_ndim: int | None = None

    def storage_ndim(self) -> int:
        """The ``ndim`` of the buffer's storage (asked of its actor once; 1 if it cannot tell)."""
        if self._storage_ndim is None:
            self._storage_ndim = 1
            if self._actor is not None:
                try:
                    self._storage_ndim = ray.get(
                        self._actor.__ray_call__.remote(_storage_ndim), timeout=self.timeout_s
                    )
                except RayActorError as err:
                    raise buffer_died("a worker's look at the storage", err) from None
        return self._storage_ndim

    def extend(self, td: TensorDictBase, record: Any = None) -> None:
        """Writes ``td`` (all of it, in one call: a batch is never half-written).

        Args:
            td: the frames.
            record: kept in the buffer's actor with the write, atomically, as the
                last write of ``record.worker_id`` (see :func:`last_write`).
        """
        if self._actor is None:
            self.client.extend(td)
            return
        payload = self._codec.encode(td)
        try:
            ray.get(
                self._actor.__ray_call__.remote(_extend_decoded, payload, record),
                timeout=self.timeout_s,
            )
        except RayActorError as err:
            raise buffer_died("a worker's write", err) from None


def last_write(buffer: Any, worker_id: int, timeout_s: float = WRITE_TIMEOUT_S) -> Any:
    """The record of the last batch ``worker_id`` wrote into ``buffer``, or ``None``.

    Args:
        buffer: the Ray-held buffer (``RayReplayBuffer``) the workers write into.
        worker_id: the worker.
        timeout_s: the longest to wait for the buffer's answer.

    Raises:
        ReplayBufferDied: the buffer's actor is dead.
        ray.exceptions.GetTimeoutError: it did not answer within ``timeout_s``.
    """
    actor = _plain_ray_actor(buffer.client())
    if actor is None:
        return None
    try:
        return ray.get(actor.__ray_call__.remote(_last_record, worker_id), timeout=timeout_s)
    except RayActorError as err:
        raise buffer_died("the driver's look for a dead worker's last write", err) from None


def _plain_ray_actor(client: Any) -> Any:
    """The buffer actor behind a client of torchrl's ``"ray"`` transport, else ``None``."""
    try:
        from torchrl.data.replay_buffers.ray_buffer import _RayReplayBufferClient
    except ImportError:  # another torchrl: write through the client
        return None
    if isinstance(client, _RayReplayBufferClient) and not client.has_gpu:
        return client._actor
    return None


def _extend_decoded(buffer: Any, payload: Payload, record: Any) -> None:
    """Runs inside the buffer's actor: decodes the payload, extends the buffer, keeps ``record``."""
    buffer.extend(TensorDictCodec().decode(payload))
    if record is not None:
        buffer.__dict__.setdefault(_RECORDS, {})[record.worker_id] = record


def _storage_ndim(buffer: Any) -> int:
    """Runs inside the buffer's actor: its storage's ``ndim`` (1 where it has none)."""
    return int(getattr(getattr(buffer, "_storage", None), "ndim", 1) or 1)


def _last_record(buffer: Any, worker_id: int) -> Any:
    """Runs inside the buffer's actor: the last record kept for ``worker_id``."""
    return buffer.__dict__.get(_RECORDS, {}).get(worker_id)
