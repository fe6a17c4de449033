"""Values put into Ray's object store once, with a one-line error when they cannot be pickled.

Ray's own error for an unpicklable value is a page of serializability checks; a
value a user gave (an env config, say) is checked here first, so that the message
names it and what could not be pickled.

Example:
    >>> import threading
    >>> put({"lock": threading.Lock()}, what="the env config")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: the env config cannot be pickled (it is sent ... TypeError: cannot pickle '_thread.lock' object
"""

from __future__ import annotations

from typing import Any

import ray

__all__ = ["put"]


def put(value: Any, *, what: str) -> Any:
    """``ray.put(value)`` (one copy in the object store, shared by every worker); returns its ref.

    Args:
        value: what to put.
        what: how the error names it.

    Raises:
        TypeError: ``value`` cannot be pickled (checked before Ray is asked).
    """
    try:  # what Ray would pickle, here first: Ray's own error is a page long
        ray.cloudpickle.dumps(value)
    except Exception as err:  # noqa: BLE001 - pickling raises several types
        raise TypeError(
            f"{what} cannot be pickled (it is sent to the workers through Ray's object store): "
            f"{type(err).__name__}: {err}"
        ) from None
    return ray.put(value)
