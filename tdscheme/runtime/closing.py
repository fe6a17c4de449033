"""``with`` blocks for the objects that own Ray actors: leaving the block shuts them down.

Example:
    >>> class Owner(ShutdownOnExit):
    ...     def shutdown(self) -> None:
    ...         print("actors gone")
    >>> with Owner() as owner:
    ...     pass
    actors gone
"""

from __future__ import annotations

from typing import Self

__all__ = ["ShutdownOnExit"]


class ShutdownOnExit:
    """``__enter__`` returns the object; ``__exit__`` calls its ``shutdown()``, error or not."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()  # type: ignore[attr-defined]
