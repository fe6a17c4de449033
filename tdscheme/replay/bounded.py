"""BoundedRayBuffer: every call tdscheme makes to a Ray-held torchrl buffer waits a bounded time.

torchrl's ``RayReplayBuffer`` waits on its actor with a bare ``ray.get``: a hung buffer
would hang the learner forever. The off-policy training loop and the checkpoints call
the buffer through this wrapper instead, and each call it makes is bounded by
``timeout_s`` (``SchemeConfig.batch_timeout_s``):

* torchrl's ``"ray"`` transport: each call goes to the buffer's actor as a Ray call,
  waited for with ``ray.get(..., timeout=)``; samples are asked for one ahead
  (``prefetch=1``).
* torchrl's ``"distributed"`` transport: ``sample``, ``extend`` and
  ``update_tensordict_priority`` go through torchrl's distributed client with its own
  ``timeout=`` (the first call of each binds torchrl's schema with an unbounded Ray call:
  that one runs in a helper thread, waited for ``timeout_s``); the length, the write
  count, indexing, ``dumps`` and ``loads`` go to the buffer's actor, as above.
* ``shutdown()``: torchrl's, bounded; a buffer that does not answer is killed.

Any other attribute (``buffer.<name>``) is torchrl's buffer's own, forwarded as it is
for the user's own calls: those wait as torchrl does. tdscheme calls none of them
(``tests/faults/test_ray_buffer.py`` records the names a real run asks for).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from tdscheme.replay.ray_held import (
    bounded_in_thread,
    buffer_actor,
    buffer_died,
    is_distributed,
    samples_by_priority,
)

__all__ = ["BoundedRayBuffer"]

logger = logging.getLogger(__name__)

#: The methods torchrl's distributed client runs over its own transport (the rest: the actor).
_DISTRIBUTED = ("sample", "extend", "update_tensordict_priority")


def _is_transport_error(err: BaseException) -> bool:
    """Whether ``err`` is torchrl's distributed transport failing to reach the buffer's actor."""
    try:
        from torchrl._comm.mailbox import MailboxTransportError
    except ImportError:  # another torchrl
        return False
    return isinstance(err, MailboxTransportError)


class BoundedRayBuffer:
    """A Ray-held torchrl buffer (``RayReplayBuffer``) whose calls each wait ``timeout_s`` at most.

    Args:
        buffer: the buffer (torchrl's ``RayReplayBuffer`` or a buffer with
            ``service_backend="ray"``), with the ``"ray"`` or ``"distributed"`` transport.
        timeout_s: the longest any call may take.
        prefetch: ``1``: each ``sample()`` (of the size of the first one) also
            asks for the next one (the ``"ray"`` transport); ``0``: no sample ahead.
        prioritized: whether the buffer samples by priority (``None``: its actor is
            asked, once, when :attr:`prioritized` is first read).

    Raises (from each call):
        TimeoutError: the buffer's actor did not answer within ``timeout_s``.
        ReplayBufferDied: the buffer's actor is dead.
    """

    def __init__(
        self, buffer: Any, timeout_s: float, *, prefetch: int = 0, prioritized: bool | None = None
    ) -> None:
        if prefetch not in (0, 1):
            raise ValueError(f"prefetch={prefetch!r} is invalid; accepted: 0 or 1")
        self.buffer = buffer
        self.timeout_s = timeout_s
        self.prefetch = prefetch
        self._prioritized = prioritized
        # torchrl's actor, whatever the transport (a buffer's, or a client's)
        self._actor = getattr(buffer, "_rb", None) or buffer_actor(buffer)
        self._distributed = is_distributed(buffer)
        self._bound: set[str] = set()  # distributed calls whose schema torchrl has bound
        self._next_sample: Any = None  # the sample asked for ahead: (batch_size, ObjectRef)

    @property
    def prioritized(self) -> bool:
        """Whether the buffer's sampler (in its actor) is a ``PrioritizedSampler``."""
        if self._prioritized is None:
            self._prioritized = samples_by_priority(self.buffer, self.timeout_s)
        return self._prioritized

    # -- the calls ------------------------------------------------------------------------

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._distributed and method in _DISTRIBUTED:
            return self._call_distributed(method, *args)
        if self._actor is None:  # a buffer without torchrl's actor: bounded in a thread
            call = getattr(self.buffer, method)
            return self._in_thread(lambda: call(*args, **kwargs), method)
        return self._get(self._submit(method, *args, **kwargs), method)

    def _call_distributed(self, method: str, *args: Any) -> Any:
        def call() -> Any:
            return getattr(self.buffer, method)(*args, timeout=self.timeout_s)

        if method in self._bound:
            return self._answer(call, method)
        value = self._in_thread(call, method)  # binds torchrl's schema: an unbounded ray.get
        self._bound.add(method)
        return value

    def _answer(self, call: Callable[[], Any], method: str) -> Any:
        start = time.monotonic()
        try:
            return call()
        except (TimeoutError, concurrent.futures.TimeoutError):  # torchrl's client's own bound
            raise self._timeout(method) from None
        except RayActorError as err:
            raise buffer_died(f"the learner's {method}()", err) from None
        except RuntimeError as err:
            if not _is_transport_error(err) or self._actor is None:
                raise
            # torchrl's transport takes an actor that misses its 0.5 s ping for closed: dead
            # or hung, which the actor itself tells, within what is left of the bound
            left = max(1.0, self.timeout_s - (time.monotonic() - start))
            self._get(self._actor.__ray_ready__.remote(), method, timeout_s=left)
            raise  # the actor answers: torchrl's transport failed for a reason of its own

    def _in_thread(self, call: Callable[[], Any], method: str) -> Any:
        try:
            return bounded_in_thread(lambda: self._answer(call, method), self.timeout_s, method)
        except TimeoutError:
            raise self._timeout(method) from None

    def _submit(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._actor, method).remote(*args, **kwargs)
        except RayActorError as err:
            raise buffer_died(f"the learner's {method}()", err) from None

    def _get(self, ref: Any, method: str, *, timeout_s: float | None = None) -> Any:
        try:
            return ray.get(ref, timeout=self.timeout_s if timeout_s is None else timeout_s)
        except GetTimeoutError:
            raise self._timeout(method) from None
        except RayActorError as err:
            raise buffer_died(f"the learner's {method}()", err) from None

    def _timeout(self, method: str) -> TimeoutError:
        return TimeoutError(
            f"the replay buffer's actor did not answer {method}() within {self.timeout_s:g} s "
            f"(batch_timeout_s)"
        )

    # -- what tdscheme calls ------------------------------------------------------------------

    def sample(self, batch_size: int | None = None) -> Any:
        """``buffer.sample(batch_size)``, bounded; the next one of the same size asked for
        ahead (``prefetch``)."""
        args = [] if batch_size is None else [batch_size]
        ahead = self._next_sample
        if self._distributed or self._actor is None or not self.prefetch:
            return self._call("sample", *args)
        if ahead is not None and ahead[0] != batch_size:  # another size: asked now, not ahead
            return self._call("sample", *args)
        ref = ahead[1] if ahead is not None else self._submit("sample", *args)
        self._next_sample = None
        sample = self._get(ref, "sample")
        # sampled while the learner uses this one
        self._next_sample = (batch_size, self._submit("sample", *args))
        return sample

    def __len__(self) -> int:
        return self._call("__len__")

    @property
    def write_count(self) -> int:
        """Frames (rows) written so far, bounded."""
        if self._actor is None:  # another kind of buffer: its own, in a helper thread
            return self._in_thread(lambda: self.buffer.write_count, "write_count")
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

    def client(self) -> BoundedRayBuffer:
        """A client of the buffer for another process (a learner rank), its calls bounded alike.

        torchrl's ``buffer.client()`` (picklable: an actor handle) in a BoundedRayBuffer
        of the same ``timeout_s`` and ``prefetch``.
        """
        return BoundedRayBuffer(
            self.buffer.client(), self.timeout_s, prefetch=self.prefetch,
            prioritized=self.prioritized,  # a client has no `_rb` to ask
        )  # fmt: skip

    def shutdown(self) -> None:
        """torchrl's ``shutdown`` (its actor stopped, its Ray lease released), bounded.

        A buffer whose actor does not answer within ``timeout_s`` is killed.
        """
        try:
            bounded_in_thread(self.buffer.shutdown, self.timeout_s, "shutdown")
        except TimeoutError:
            logger.warning("the replay buffer did not shut down in %g s; killed", self.timeout_s)
            if self._actor is not None:
                ray.kill(self._actor, no_restart=True)

    def __getattr__(self, name: str) -> Any:
        # the user's own calls: torchrl's buffer as it is (tdscheme's calls are the methods above)
        if name in ("buffer", "timeout_s", "prefetch", "_actor", "_next_sample", "_bound",
                    "_distributed"):  # fmt: skip
            raise AttributeError(name)
        return getattr(self.buffer, name)

    def __repr__(self) -> str:
        return f"BoundedRayBuffer({type(self.buffer).__name__}, timeout_s={self.timeout_s:g})"
