"""Every exception tdscheme raises to its users, in one place (also importable from ``tdscheme``).

A run fails with one of these for a reason of its own; each message names what failed
(the worker and its remote traceback, the argument, the buffer, the checkpoint file):

* :class:`WorkerError`: an exception raised inside a worker actor, or its death past
  ``max_restarts``; :class:`GradientWorkerError` and :class:`EvalWorkerError` name a
  gradient worker or an eval worker instead of a collector worker.
* :class:`PlacementError`: actors Ray cannot place, or did not place in time.
* :class:`ReplayBufferDied`: the actor of a Ray-held replay buffer died.
* :class:`NonFiniteInputError`: an env returned NaN or inf where the policy reads it.
* :class:`NonFiniteUpdateError`: too many learner updates in a row met NaN or inf.
* :class:`CheckpointError`: a checkpoint file exists but cannot be used.

This module imports nothing: every room of the package may import it.

Example:
    >>> str(WorkerError(1, "boom"))
    'collector worker 1: boom'
    >>> str(GradientWorkerError(0, "boom"))
    'gradient worker 0: boom'
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ACTOR_DIED",
    "CheckpointError",
    "EvalWorkerError",
    "GradientWorkerError",
    "LearnerGroupError",
    "NonFiniteInputError",
    "NonFiniteUpdateError",
    "PlacementError",
    "ReplayBufferDied",
    "WorkerError",
]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: ``WorkerError.remote_type`` of a call whose actor died during it (nothing was raised).
ACTOR_DIED = "ActorDied"


class WorkerError(RuntimeError):
    """An error raised inside a worker actor (or its death past ``max_restarts``), on the driver.

    Attributes:
        worker_id: the worker that failed.
        message: what failed, without the worker's name or the traceback.
        remote_traceback: the traceback text from the worker process.
        role: how the message names the worker (``"collector worker"`` here;
            subclasses for other actors change it).
        method: the actor method that raised (``None``: not an exception raised
            in a call, e.g. a death past ``max_restarts``).
        remote_type: the class name of the exception raised in the actor
            (``"ActorDied"``: the actor died during the call; ``None`` as for ``method``).

    Example:
        >>> str(WorkerError(1, "boom"))
        'collector worker 1: boom'
    """

    role = "collector worker"

    def __init__(
        self,
        worker_id: int,
        message: str,
        remote_traceback: str = "",
        *,
        method: str | None = None,
        remote_type: str | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.message = message
        self.method = method
        self.remote_type = remote_type
        self.remote_traceback = _ANSI.sub("", remote_traceback)
        text = f"{self.role} {worker_id}: {message}"
        if remote_traceback:
            text += f"\n--- remote traceback ({self.role} {worker_id}) ---\n{self.remote_traceback}"
        super().__init__(text)

    @classmethod
    def raised_in(cls, worker_id: int, method: str, err: Any) -> WorkerError:
        """The error for ``method`` having raised inside the actor (``err``: Ray's ``RayTaskError``)."""
        kind = type(err.cause).__name__
        return cls(
            worker_id, f"{method} raised {kind}: {err.cause}", str(err),
            method=method, remote_type=kind,
        )  # fmt: skip


class GradientWorkerError(WorkerError):
    """An error raised inside a gradient worker (or its death past ``max_restarts``), on the driver."""

    role = "gradient worker"


class LearnerGroupError(WorkerError):
    """An error raised inside a learner rank (or its death past ``max_restarts``), on the driver."""

    role = "learner rank"


class EvalWorkerError(WorkerError):
    """An error raised inside an eval worker (or its death past ``max_restarts``), on the driver."""

    role = "eval worker"


class PlacementError(RuntimeError):
    """Actors that Ray cannot place (impossible) or did not place in time (pending)."""


class ReplayBufferDied(RuntimeError):
    """The actor of a Ray-held replay buffer died (its frames went with it).

    A worker that meets it is not rebuilt (a new worker would write into the same
    dead actor): the driver raises it at once, as a ``WorkerError`` naming it.
    """


class NonFiniteInputError(RuntimeError):
    """An env returned NaN or inf where the policy reads it (the policy then failed)."""


class NonFiniteUpdateError(RuntimeError):
    """Too many updates in a row met NaN or inf (``LearnerConfig.max_nonfinite_updates``)."""


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be used: corrupt, truncated, unsafe or foreign."""
