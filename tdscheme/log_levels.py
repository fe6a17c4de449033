"""One log level for a driver, the local Ray it starts and its worker actors.

The level is the driver's ``tdscheme`` logger's (WARNING unless the program
configures logging; ``tdscheme -v`` makes it INFO). :mod:`tdscheme.runtime`
hands it to ``ray.init`` (``logging_level``: Ray's own records on the driver),
and the pools that start collector and gradient worker actors pass it to them:
each actor sets its process's ``tdscheme``, ``torchrl`` and ``ray`` loggers to
it (:func:`configure_worker_logging`) before it builds anything. By default a
worker's INFO records (torchrl announcing how it wrapped an env, for instance)
stay in the worker, while its warnings, errors and exceptions reach the driver
as before.

Example:
    >>> import logging
    >>> driver_log_level() == logging.getLogger("tdscheme").getEffectiveLevel()
    True
"""

from __future__ import annotations

import logging
import os

__all__ = [
    "WORKER_LOGGERS",
    "configure_driver_logging",
    "configure_worker_logging",
    "driver_log_level",
]

#: The loggers a worker actor sets to the driver's level.
WORKER_LOGGERS = ("tdscheme", "torchrl", "ray")

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def driver_log_level() -> int:
    """The level this process hands to the Ray it starts and to the worker actors it creates.

    Returns:
        The effective level of the ``tdscheme`` logger (``logging.WARNING``
        when nothing configured it or the root logger).
    """
    return logging.getLogger("tdscheme").getEffectiveLevel()


def configure_driver_logging(level: int) -> None:
    """The ``tdscheme`` command's logging: records of ``level`` and above, to stderr.

    Adds a stderr handler to the root logger if it has none and sets the
    ``tdscheme`` and ``torchrl`` loggers to ``level`` (torchrl logs INFO by
    default). Calling it again only changes the levels.

    Args:
        level: a ``logging`` level, e.g. ``logging.INFO`` for ``tdscheme -v``.
    """
    logging.basicConfig(level=level, format=_FORMAT)
    for name in ("tdscheme", "torchrl"):
        logging.getLogger(name).setLevel(level)
    # torchrl sets its logger's level when it is imported, which may come later (the
    # command imports it while Ray starts): it reads the level from RL_LOGGING_LEVEL
    os.environ.setdefault("RL_LOGGING_LEVEL", logging.getLevelName(level))


def configure_worker_logging(level: int) -> None:
    """Sets a worker actor's :data:`WORKER_LOGGERS` to the driver's ``level``.

    Meant for a process the actor owns; an in-process worker (tests, debugging)
    is given no level and leaves logging alone. Below WARNING, a stderr handler
    is added to the root logger if it has none, so that tdscheme's own INFO
    records are printed (and streamed to the driver by Ray) too.

    Args:
        level: a ``logging`` level, usually :func:`driver_log_level` on the driver.

    Raises:
        ValueError: ``level`` is not an int level.

    Example:
        >>> configure_worker_logging("INFO")
        Traceback (most recent call last):
        ...
        ValueError: level='INFO' is invalid; accepted: an int logging level, e.g. logging.WARNING
    """
    if isinstance(level, bool) or not isinstance(level, int):
        raise ValueError(
            f"level={level!r} is invalid; accepted: an int logging level, e.g. logging.WARNING"
        )
    for name in WORKER_LOGGERS:
        logging.getLogger(name).setLevel(level)
    if level < logging.WARNING and not logging.getLogger().handlers:
        logging.basicConfig(format=_FORMAT)  # the root logger keeps its level
