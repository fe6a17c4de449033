"""How a remote error reads on the driver: its exception line, a death's reason in one line.

The errors themselves are in :mod:`tdscheme.errors`.

Example:
    >>> last_exception_line("Traceback ...\\n  File x\\nValueError: bad seed")
    'ValueError: bad seed'
"""

from __future__ import annotations

import re

__all__ = ["last_exception_line", "one_line"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
