"""WorkerError: an exception raised inside a worker actor, on the driver, with the remote traceback.

Example:
    >>> str(WorkerError(1, "boom"))
    'collector worker 1: boom'
    >>> last_exception_line("Traceback ...\\n  File x\\nValueError: bad seed")
    'ValueError: bad seed'
"""

from __future__ import annotations

import re

__all__ = ["WorkerError", "last_exception_line"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class WorkerError(RuntimeError):
    """An error raised inside a worker actor (or its death past ``max_restarts``), on the driver.

    Attributes:
        worker_id: the worker that failed.
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
        self.method = method
        self.remote_type = remote_type
        self.remote_traceback = _ANSI.sub("", remote_traceback)
        text = f"{self.role} {worker_id}: {message}"
        if remote_traceback:
            text += f"\n--- remote traceback ({self.role} {worker_id}) ---\n{self.remote_traceback}"
        super().__init__(text)


def last_exception_line(text: str) -> str:
    """The last ``SomeError: message`` line of a traceback text (its first line otherwise)."""
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b.*:", line):
            return line
    return lines[0] if lines else "no message"
