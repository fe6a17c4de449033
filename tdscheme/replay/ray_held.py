"""Ray-held torchrl replay buffers: built quiet, written by workers, called with a bound, dead named.

torchrl's ``RayReplayBuffer`` (or ``ReplayBuffer(..., service_backend="ray")``) keeps the
buffer in an actor of its own and hands each writer a client. tdscheme adds four things
around it, all on torchrl's own buffer:

* **A quiet actor** (:func:`ray_buffer_kwargs`): torchrl's defaults take 1 CPU (on 2
  cores, room for one collector less) and print a ten-line repr as the prefix of the
  actor's output; the kwargs give a one-line repr, ``num_cpus=0`` and the driver's log
  level::

      buffer = RayReplayBuffer(storage=functools.partial(LazyTensorStorage, 100_000),
                               batch_size=256, **ray_buffer_kwargs())

* **Worker writes** (:class:`BufferWriter`): with torchrl's ``"ray"`` transport the batch
  is encoded by tdscheme's codec and decoded inside the buffer's actor (2-2.5x faster
  than torchrl's pickled TensorDict for a 1,024-frame write, benchmarks/replay.py),
  where the buffer's own ``extend`` writes it. A batch is written in one ``extend``, so
  a worker that dies never leaves part of a batch (or of a trajectory) in the buffer;
  the write and a record of it (the reply the worker was about to send) land together,
  and the driver asks for the record of a worker that died (:func:`last_write`): a
  batch in the buffer is counted as written, never as lost, and never asked again.
  A buffer of torchrl's ``"distributed"`` transport is written the same way (its own
  client fixes the shape of a write at its first); either way the storage's layout
  (``ndim``) is read from the buffer's actor, not assumed.
* **Bounded calls**: torchrl's client waits on its actor with a bare ``ray.get``; a
  worker's writes and its look at the storage are bounded here, the driver's calls
  (samples, counts, priorities, checkpoints) by
  :class:`~tdscheme.replay.bounded.BoundedRayBuffer`.
* **A dead actor named**: a call that finds the actor dead is a
  :class:`~tdscheme.errors.ReplayBufferDied` naming the replay buffer (its frames went
  with it: it is not rebuilt empty behind the learner's back); a worker that meets it
  is not rebuilt either.

Example:
    >>> kwargs = ray_buffer_kwargs()
    >>> kwargs["replay_buffer_cls"].__name__, kwargs["remote_config"]["num_cpus"]
    ('OneLineReprReplayBuffer', 0)
    >>> from torchrl.data import LazyTensorStorage
    >>> kwargs["replay_buffer_cls"](storage=LazyTensorStorage(8), batch_size=4)
    ReplayBuffer(LazyTensorStorage, batch_size=4)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from tensordict import TensorDictBase
from torchrl.data import ReplayBuffer

from tdscheme.errors import ReplayBufferDied
from tdscheme.log_levels import driver_log_level
from tdscheme.replay.compact import CompactFrameStorage
from tdscheme.runtime.threads import match_ray_cpus
from tdscheme.transport import Payload, TensorDictCodec

__all__ = [
    "BufferWriter",
    "bounded_in_thread",
    "OneLineReprReplayBuffer",
    "buffer_actor",
    "buffer_died",
    "is_distributed",
    "is_ray_replay_buffer",
    "last_write",
    "one_line_repr",
    "ray_buffer_kwargs",
    "ray_buffer_options",
    "samples_by_priority",
]

#: the attribute of the buffer (in its actor) that holds each worker's last write record
_RECORDS = "_tdscheme_last_writes"

#: seconds a write may take before the buffer is taken for dead
WRITE_TIMEOUT_S = 120.0


def _repr(self: ReplayBuffer) -> str:
    # torchrl's class: past the one-line subclasses (and Ray's copy of them, same name)
    name = next(c.__name__ for c in type(self).__mro__ if not c.__name__.startswith("OneLineRepr"))
    return f"{name}({type(self._storage).__name__}, batch_size={self._batch_size})"


class OneLineReprReplayBuffer(ReplayBuffer):
    """torchrl's ``ReplayBuffer`` with a one-line repr, for the actor of a Ray-held buffer."""

    __repr__ = _repr


def one_line_repr(cls: type[ReplayBuffer]) -> type[ReplayBuffer]:
    """A subclass of the torchrl buffer class ``cls`` whose repr is one line.

    Example:
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> quiet = one_line_repr(TensorDictReplayBuffer)
        >>> quiet.__name__, quiet(storage=LazyTensorStorage(8), batch_size=2)
        ('OneLineReprTensorDictReplayBuffer', TensorDictReplayBuffer(LazyTensorStorage, batch_size=2))
    """
    if cls is ReplayBuffer:
        return OneLineReprReplayBuffer
    return type(f"OneLineRepr{cls.__name__}", (cls,), {"__repr__": _repr})


def ray_buffer_options(num_cpus: float = 0) -> dict[str, Any]:
    """``RayReplayBuffer``'s ``remote_config``: ``num_cpus`` (0: it only stores) and quiet logs.

    Its actor logs at the driver's level (:mod:`tdscheme.log_levels`), as the
    collector workers do: torchrl's INFO records stay in its process.
    """
    level = logging.getLevelName(driver_log_level())
    # learner ranks sample their share of the batch (sample(batch_size / ranks)), which
    # torchrl warns of in the actor at its first such call, on the user's terminal
    quiet = "ignore:Got conflicting batch_sizes:UserWarning"
    # torchrl's own prioritized sampler (where its extension loads) ravels a [time, env]
    # storage's indices through numpy, which warns at every update (SumTreeSampler does not)
    quiet += ",ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
    env_vars = {"RL_LOGGING_LEVEL": level, "PYTHONWARNINGS": quiet}
    return {"num_cpus": num_cpus, "runtime_env": {"env_vars": env_vars}}


def ray_buffer_kwargs(
    replay_buffer_cls: type[ReplayBuffer] = ReplayBuffer, *, num_cpus: float = 0
) -> dict[str, Any]:
    """Keyword arguments for ``RayReplayBuffer``: a one-line repr, ``num_cpus``, quiet logs.

    Args:
        replay_buffer_cls: torchrl's buffer class the actor holds (``RayReplayBuffer``'s
            argument of that name), e.g. ``TensorDictReplayBuffer``.
        num_cpus: CPUs the actor takes from Ray (0 for one that only stores; give it
            more when it does work, e.g. a prioritized sampler under many writers).
    """
    return {
        "replay_buffer_cls": one_line_repr(replay_buffer_cls),
        "remote_config": ray_buffer_options(num_cpus),
    }


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


class BufferWriter:
    """Writes a worker's frames into a Ray-held torchrl buffer through its client.

    torchrl's ``"ray"`` transport (the default) pickles the TensorDict for every
    ``extend``; with tdscheme's codec (one numpy buffer per leaf, sent out of band) a
    1,024-frame write is 2-2.5x faster (benchmarks/replay.py, section ``buffer``). So
    for that transport the batch is encoded here and decoded inside the buffer's
    actor, where the buffer's own ``extend`` writes it (Ray's ``__ray_call__`` runs a
    function on the actor): torchrl's storage, sampler and writer do the rest, as
    for any client write. So do the writes into a buffer of torchrl's
    ``"distributed"`` transport: its own client binds a schema to the shape of its
    first write, and a worker's last write, cut to the frame budget, is shorter (the
    driver still samples through that transport).

    Args:
        client: a client of the buffer (``RayReplayBuffer.client()``).
        timeout_s: the longest a write may take (a dead buffer is an error, not a hang).
        fold_next_bytes: the codec's (each observation once on the wire, the buffer's
            actor rebuilds ``("next", obs)``); ``None``: whole.
    """

    def __init__(
        self, client: Any, timeout_s: float = WRITE_TIMEOUT_S, *, fold_next_bytes: int | None = None
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._actor = _plain_ray_actor(client)
        self._codec = TensorDictCodec(fold_next_bytes=fold_next_bytes)
        self._storage_ndim: int | None = None

    def storage_ndim(self) -> int:
        """The ``ndim`` of the buffer's storage, asked of its actor once (either transport).

        Raises:
            ReplayBufferDied: the buffer's actor is dead.
            TimeoutError: it did not answer within ``timeout_s``.
            TypeError: the client is neither of torchrl's (no actor to ask).
        """
        if self._storage_ndim is None:
            actor = buffer_actor(self.client)
            if actor is None:
                raise TypeError(
                    f"the replay buffer's client is a {type(self.client).__name__}; accepted: a "
                    f"client of torchrl's RayReplayBuffer (transport 'ray' or 'distributed')"
                )
            try:
                self._storage_ndim = ray.get(
                    actor.__ray_call__.remote(_storage_ndim), timeout=self.timeout_s
                )
            except GetTimeoutError:
                raise TimeoutError(
                    f"the replay buffer's actor did not answer in {self.timeout_s:g} s"
                ) from None
            except RayActorError as err:
                raise buffer_died("a worker's look at the storage", err) from None
        return self._storage_ndim

    def extend(self, td: TensorDictBase, record: Any = None) -> None:
        """Writes ``td`` (all of it, in one call: a batch is never half-written).

        Args:
            td: the frames.
            record: kept in the buffer's actor with the write, atomically, as the
                last write of ``record.worker_id`` (see :func:`last_write`); the
                ``"ray"`` transport only.

        Raises:
            ReplayBufferDied: the buffer's actor is dead.
            TimeoutError: the write did not finish within ``timeout_s``.
        """
        if self._actor is None:  # torchrl's client of a buffer on a GPU: its own extend
            bounded_in_thread(lambda: self.client.extend(td), self.timeout_s, "a worker's write")
            return
        payload = self._codec.encode(td)
        try:
            ray.get(
                self._actor.__ray_call__.remote(_extend_decoded, payload, record),
                timeout=self.timeout_s,
            )
        except GetTimeoutError:
            raise TimeoutError(f"a write did not finish in {self.timeout_s:g} s") from None
        except RayActorError as err:
            raise buffer_died("a worker's write", err) from None


def bounded_in_thread(call: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Runs ``call()`` in a helper thread and returns its value, waiting at most ``timeout_s``.

    For a call that itself waits without a bound (torchrl's bare ``ray.get``): past the
    bound the caller gets an error and the thread is left to its wait (it ends when the
    call does: the actor answers, or dies and Ray says so).

    Raises:
        TimeoutError: ``call`` did not return within ``timeout_s`` (naming ``what``).
        BaseException: whatever ``call`` raised.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as err:  # noqa: BLE001 - raised in the caller's thread
            box["error"] = err

    thread = threading.Thread(target=run, name=f"tdscheme-bounded-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not return within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


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
    shard_for_worker = getattr(buffer, "shard_for_worker", None)
    if callable(shard_for_worker):  # a ShardedReplayBuffer: the shard this worker writes into
        buffer = shard_for_worker(worker_id)
    actor = getattr(buffer, "_rb", None)  # torchrl's actor (a "distributed" client() waits)
    if not isinstance(actor, ray.actor.ActorHandle):
        return None
    try:
        return ray.get(actor.__ray_call__.remote(_last_record, worker_id), timeout=timeout_s)
    except RayActorError as err:
        raise buffer_died("the driver's look for a dead worker's last write", err) from None


def _samples_by_priority(buffer: ReplayBuffer) -> bool:
    from torchrl.data import PrioritizedSampler

    return isinstance(buffer.sampler, PrioritizedSampler)


def samples_by_priority(buffer: Any, timeout_s: float = WRITE_TIMEOUT_S) -> bool:
    """Whether the Ray-held ``buffer``'s sampler (in its actor) is a ``PrioritizedSampler``.

    Raises:
        ReplayBufferDied: the buffer's actor is dead.
        ray.exceptions.GetTimeoutError: it did not answer within ``timeout_s``.
    """
    actor = getattr(buffer, "_rb", None) or buffer_actor(buffer)
    if not isinstance(actor, ray.actor.ActorHandle):
        return False
    try:
        return ray.get(actor.__ray_call__.remote(_samples_by_priority), timeout=timeout_s)
    except RayActorError as err:
        raise buffer_died("the driver's look at its sampler", err) from None


def buffer_actor(client: Any) -> Any:
    """The buffer actor behind a client of either of torchrl's transports, else ``None``."""
    actor = getattr(client, "_actor", None)
    return actor if isinstance(actor, ray.actor.ActorHandle) else None


def is_distributed(buffer: Any) -> bool:
    """Whether ``buffer`` (torchrl's Ray-held buffer or its client) has the ``"distributed"`` transport."""
    try:
        from torchrl.data.replay_buffers.ray_buffer import (
            RayReplayBuffer,
            _LazyDistributedReplayClient,
        )
    except ImportError:  # another torchrl
        return getattr(buffer, "transport_kind", "ray") == "distributed"
    if isinstance(buffer, _LazyDistributedReplayClient):
        return True
    return isinstance(buffer, RayReplayBuffer) and buffer.transport_kind == "distributed"


def _plain_ray_actor(client: Any) -> Any:
    """The buffer actor a worker writes into through the codec, else ``None``.

    A client of either of torchrl's transports: ``"ray"`` (unless the buffer is on a GPU:
    then torchrl's client moves the frames itself) or ``"distributed"``, whose own
    writes bind a schema to the first write's shape (a cut last write would not fit).
    """
    try:
        from torchrl.data.replay_buffers.ray_buffer import (
            _LazyDistributedReplayClient,
            _RayReplayBufferClient,
        )
    except ImportError:  # another torchrl: write through the client
        return None
    if isinstance(client, _RayReplayBufferClient) and not client.has_gpu:
        return client._actor
    if isinstance(client, _LazyDistributedReplayClient):
        return client._actor
    return None


def _extend_decoded(buffer: Any, payload: Payload, record: Any) -> None:
    """Runs inside the buffer's actor: decodes the payload, extends the buffer, keeps ``record``.

    A storage of one transition per slot (:class:`~tdscheme.replay.compact.CompactFrameStorage`)
    gets a ``[num_envs, time]`` batch as its rows one after the other. torchrl's actor
    in a worker process of tdscheme's local Ray gets torch's threads set as tdscheme's
    own actors do (:func:`~tdscheme.runtime.threads.match_ray_cpus`).
    """
    match_ray_cpus()
    td = TensorDictCodec().decode(payload)
    if td.ndim > 1 and isinstance(getattr(buffer, "_storage", None), CompactFrameStorage):
        td = td.reshape(-1)
    buffer.extend(td)
    if record is not None:
        buffer.__dict__.setdefault(_RECORDS, {})[record.worker_id] = record


def _storage_ndim(buffer: Any) -> int:
    """Runs inside the buffer's actor: its storage's ``ndim`` (1 where it has none).

    A buffer that flattens each ``[num_envs, time]`` write into frames itself
    (``writes_frames``, the shards' ``FrameReplayBuffer``) takes writes as a storage of
    ``ndim=2`` does: frame by frame, cut along time.
    """
    if getattr(buffer, "writes_frames", False):
        return 2
    return int(getattr(getattr(buffer, "_storage", None), "ndim", 1) or 1)


def _last_record(buffer: Any, worker_id: int) -> Any:
    """Runs inside the buffer's actor: the last record kept for ``worker_id``."""
    return buffer.__dict__.get(_RECORDS, {}).get(worker_id)
