"""WorkerError: an exception raised inside a worker actor, on the driver, with the remote traceback.

Example:
    >>> str(WorkerError(1, "boom"))
    'collector worker 1: boom'
    >>> last_exception_line("Traceback ...\\n  File x\\nValueError: bad seed")
    'ValueError: bad seed'
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ACTOR_DIED", "WorkerError", "last_exception_line", "one_line"]

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


def last_exception_line(text: str) -> str:
    """The last ``SomeError: message`` line of a traceback text (its first line otherwise)."""
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b.*:", line):
            return line
    return lines[0] if lines else "no message"


def one_line(reason: str) -> str:
    r"""A death's reason in one line: Ray's first line and its "because" sentence, if any.

    Example:
        >>> one_line("ActorDiedError: The actor died.\n\tpid: 7\nThe actor is dead because it was killed.")
        'ActorDiedError: The actor died. The actor is dead because it was killed.'
        >>> one_line("ActorDiedError: The actor died. The actor is dead because its worker process "
        ...          "has died. Worker exit type: SYSTEM_ERROR Worker exit detail: ... Some causes")
        'ActorDiedError: The actor died. The actor is dead because its worker process has died.'
    """
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    because = [line for line in lines[1:] if "because" in line]
    text = " ".join(lines[:1] + because[:1])
    sentences = re.split(r"(?<=\.)\s+", text)
    for end, sentence in enumerate(sentences, 1):
        if "because" in sentence:  # Ray's exit details and "common causes" follow it
            return " ".join(sentences[:end])
    return text
