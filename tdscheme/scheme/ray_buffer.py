"""BoundedRayBuffer: a Ray-held torchrl replay buffer whose every call has a time bound.

torchrl's ``RayReplayBuffer`` waits on its actor with a bare ``ray.get``: a buffer
actor that hangs blocks the learner for ever, and one that died surfaces as Ray's
``ActorDiedError`` from deep inside a sample. The off-policy Scheme samples,
counts, writes priorities and checkpoints through this wrapper instead: each call
goes to the same actor, bounded by ``timeout_s``; a call past it is a
``TimeoutError`` naming the call, and a dead actor a :class:`ReplayBufferDied`
naming the replay buffer (the run's frames are in it: it is not rebuilt
empty behind the learner's back). Everything else is the wrapped buffer's.

The learner's samples are prefetched (``prefetch=1``, as torchrl's ``prefetch=``
on a local buffer): each ``sample()`` asks the actor for the next one before it
returns, so the actor samples and the transfer runs while the learner computes
its update. A prioritized buffer is not prefetched (a sample drawn ahead would
miss the priorities the current update writes).

torchrl's ``"distributed"`` transport does not go through the actor's methods
for its data: with it the calls are the buffer's own (unbounded, as in torchrl).
"""

from __future__ import annotations

from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from tdscheme.collectors.worker.buffer_writer import ReplayBufferDied, buffer_died

__all__ = ["BoundedRayBuffer", "ReplayBufferDied"]


class BoundedRayBuffer:
    """A Ray-held torchrl buffer (``RayReplayBuffer``) whose calls each wait ``timeout_s`` at most.

    Args:
        buffer: the buffer (torchrl's ``RayReplayBuffer`` or a buffer with
            ``service_backend="ray"``).
        timeout_s: the longest any call may take.
        prefetch: ``1``: each ``sample()`` (of the buffer's own batch size) also
            asks for the next one; ``0``: no sample ahead.

    Raises (from each call):
        TimeoutError: the buffer's actor did not answer within ``timeout_s``.
        ReplayBufferDied: the buffer's actor is dead.
    """

    def __init__(self, buffer: Any, timeout_s: float, *, prefetch: int = 0) -> None:
        if prefetch not in (0, 1):
            raise ValueError(f"prefetch={prefetch!r} is invalid; accepted: 0 or 1")
        self.buffer = buffer
        self.timeout_s = timeout_s
        self.prefetch = prefetch
        actor = getattr(buffer, "_rb", None)
        self._actor = actor if getattr(buffer, "transport_kind", "ray") == "ray" else None
        self._next_sample: Any = None  # the sample asked for ahead (an ObjectRef)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._actor is None:
            return getattr(self.buffer, method)(*args, **kwargs)
        return self._get(self._submit(method, *args, **kwargs), method)

    def _submit(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._actor, method).remote(*args, **kwargs)
        except RayActorError as err:
            raise buffer_died(f"the learner's {method}()", err) from None

    def _get(self, ref: Any, method: str) -> Any:
        try:
            return ray.get(ref, timeout=self.timeout_s)
        except GetTimeoutError:
            raise TimeoutError(
                f"the replay buffer's actor did not answer {method}() within "
                f"{self.timeout_s:g} s (batch_timeout_s)"
            ) from None
        except RayActorError as err:
            raise buffer_died(f"the learner's {method}()", err) from None

    def sample(self, batch_size: int | None = None) -> Any:
        """``buffer.sample(batch_size)``, bounded; the next one asked for ahead (``prefetch``)."""
        if self._actor is None or not self.prefetch or batch_size is not None:
            return self._call("sample", batch_size)
        ref = self._next_sample if self._next_sample is not None else self._submit("sample")
        self._next_sample = None
        sample = self._get(ref, "sample")
        self._next_sample = self._submit("sample")  # sampled while the learner uses this one
        return sample

    def __len__(self) -> int:
        return self._call("__len__")

    @property
    def write_count(self) -> int:
        """Frames (rows) written so far, bounded."""
        if self._actor is None:  # another transport: the buffer's own
            return self.buffer.write_count
        return self._call("_getattr", "write_count")

    def __getitem__(self, index: Any) -> Any:
        return self._call("__getitem__", index)

    def extend(self, data: Any) -> Any:
        """``buffer.extend(data)`` (moved to CPU, as torchrl's client does), bounded."""
        return self._call("extend", data.to("cpu") if hasattr(data, "to") else data)

    def update_tensordict_priority(self, data: Any) -> None:
        """Writes a sample's priorities back, bounded."""
        self._call("update_tensordict_priority", data)

    def dumps(self, path: str) -> None:
        """torchrl's ``dumps`` (a checkpoint of the buffer), bounded."""
        self._call("dumps", path)

    def loads(self, path: str) -> None:
        """torchrl's ``loads``, bounded."""
        self._call("loads", path)

    def __getattr__(self, name: str) -> Any:
        if name in ("buffer", "timeout_s", "prefetch", "_actor", "_next_sample"):
            raise AttributeError(name)
        return getattr(self.buffer, name)

    def __repr__(self) -> str:
        return f"BoundedRayBuffer({type(self.buffer).__name__}, timeout_s={self.timeout_s:g})"
