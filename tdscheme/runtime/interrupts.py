"""Ctrl-C and SIGTERM as a request to stop between steps, not an exception wherever they land.

The ``tdscheme`` command installs these handlers (:func:`install`). The first
SIGINT or SIGTERM only records the request (:func:`stop_requested`); the loop
that owns the run (:class:`~tdscheme.engine.Trainer`) checks it between steps and
stops cleanly: a final checkpoint, workers shut down, exit status 130 (SIGINT) or
143 (SIGTERM). So an interrupt never lands inside a torchrl loss, a weight push
or a Ray wait, where another library would turn it into its own error. A second
signal, or a step that has not returned within the grace period after the first,
forces the stop: :class:`KeyboardInterrupt` is raised in the main thread. The grace
period is ``grace_s``, or ``STEP_FACTOR`` times the longest of the run's recent steps
when that is longer (the loop reports each step's seconds, :func:`note_step`), so that
a run whose steps take a minute (a pixel learner on 2 cores) still ends cleanly.

``ray.init`` installs Ray's own SIGTERM handler (``sys.exit``);
:mod:`tdscheme.runtime.ray_lease` calls :func:`reinstall` after it, so tdscheme's
handlers stay in place. Nothing here is installed at import, and a library user
who never calls :func:`install` keeps Python's default behaviour.

Example:
    >>> import signal
    >>> install(grace_s=5.0)
    >>> note_step(4.0)  # a step of 4 s: a grace period of 3 x 4 s
    >>> grace_period_s()
    12.0
    >>> stop_requested()
    >>> signal.raise_signal(signal.SIGTERM)
    >>> stop_requested()
    'SIGTERM'
    >>> exit_status()
    143
    >>> uninstall()
    >>> stop_requested()
"""

from __future__ import annotations

import collections
import logging
import signal
import threading
import time
from typing import Any

__all__ = [
    "exit_status",
    "forced",
    "grace_period_s",
    "install",
    "installed",
    "note_step",
    "reinstall",
    "request",
    "stop_requested",
    "uninstall",
]

logger = logging.getLogger(__name__)

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The grace period is at least this many times the longest recent step.
STEP_FACTOR = 3.0
#: Steps remembered for the grace period.
RECENT_STEPS = 20


class _State:
    """Process-wide: which handlers are installed, and the stop request."""

    installed = False
    grace_s = 10.0
    previous: dict[int, Any] = {}
    signum: int | None = None
    requested_at: float | None = None
    forced = False
    timer: threading.Timer | None = None
    steps: collections.deque = collections.deque(maxlen=RECENT_STEPS)


def install(*, grace_s: float = 10.0) -> None:
    """Installs tdscheme's SIGINT and SIGTERM handlers (main thread only).

    Args:
        grace_s: seconds a step may take after the first signal before the stop
            is forced (:class:`KeyboardInterrupt` in the main thread).
    """
    if threading.current_thread() is not threading.main_thread():
        logger.warning("tdscheme's signal handlers need the main thread; not installed")
        return
    if not _State.installed:
        _State.previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    _State.installed = True
    _State.grace_s = grace_s
    _clear()
    reinstall()


def reinstall() -> None:
    """Puts tdscheme's handlers back if :func:`install` was called (after ``ray.init``)."""
    if _State.installed and threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            signal.signal(sig, _handle)


def uninstall() -> None:
    """Restores the handlers :func:`install` found and forgets any stop request."""
    if _State.installed and threading.current_thread() is threading.main_thread():
        for sig, handler in _State.previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    _State.installed = False
    _clear()


def request(signum: int) -> None:
    """Records a stop request for ``signum`` as if it had been received (no force timer).

    For a signal that another handler caught first (Ray's, during ``ray.init``).
    """
    if _State.signum is None:
        _State.signum, _State.requested_at = int(signum), time.monotonic()


def note_step(seconds: float) -> None:
    """Records how long one step of the run took (for the grace period of a stop)."""
    _State.steps.append(float(seconds))


def grace_period_s() -> float:
    """Seconds a step may take after the first signal: ``grace_s`` or ``STEP_FACTOR`` x the
    longest recent step, whichever is longer."""
    return max(_State.grace_s, STEP_FACTOR * max(_State.steps, default=0.0))


def installed() -> bool:
    """Whether tdscheme's handlers are installed."""
    return _State.installed


def stop_requested() -> str | None:
    """The name of the signal that asked to stop (``"SIGINT"``, ``"SIGTERM"``), or ``None``."""
    return None if _State.signum is None else signal.Signals(_State.signum).name


def forced() -> bool:
    """Whether the stop was forced (a second signal, or the grace period ran out)."""
    return _State.forced


def exit_status() -> int | None:
    """The shell's status for the stop request: ``128 + signal`` (130, 143), or ``None``."""
    return None if _State.signum is None else 128 + _State.signum


def _clear() -> None:
    if _State.timer is not None:
        _State.timer.cancel()
    _State.signum = _State.requested_at = _State.timer = None
    _State.forced = False
    _State.steps.clear()


def _handle(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    if _State.signum is None:
        _State.signum, _State.requested_at = signum, time.monotonic()
        grace_s = grace_period_s()
        logger.warning(
            "%s: stopping after the current step (within %.0f s; send it again to force)",
            name, grace_s,
        )  # fmt: skip
        _State.timer = threading.Timer(grace_s, _force_from_timer, args=(grace_s,))
        _State.timer.daemon = True
        _State.timer.start()
        return
    _State.forced = True
    if _State.timer is not None:
        _State.timer.cancel()
    raise KeyboardInterrupt(f"{name}: stop forced")


def _force_from_timer(grace_s: float) -> None:
    if _State.signum is not None and not _State.forced:
        logger.warning("the current step did not end within %.0f s; forcing the stop", grace_s)
        # A real signal to the main thread: it also ends a sleep or a blocking wait there.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
