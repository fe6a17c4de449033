"""BackgroundCollection: a RayCollector's collection in a thread of its own (``start()``).

With a replay buffer, workers write their frames into the buffer themselves;
the thread only drives the requests (weight pushes, restarts, the frame budget)
until ``total_frames`` or until it is stopped, and, given ``hold_while``, holds
them while its consumer has enough to do (a learner paces the writers). :meth:`BackgroundCollection.pause`
drains what is in flight and holds the workers, so the buffer's write count is
frozen inside it (a quiescent point for a checkpoint). Workers that die, hang or
raise are rebuilt as in iteration (``max_restarts``); an error that stops the
thread (a worker past ``max_restarts``: its ``WorkerError``) is kept and
re-raised on the driver at the next call, never lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tdscheme.errors import WorkerError

if TYPE_CHECKING:
    from tdscheme.collectors.driver.stats import CollectorParts

__all__ = ["BackgroundCollection"]

logger = logging.getLogger(__name__)


class BackgroundCollection:
    """Runs ``batches()`` to exhaustion in a daemon thread; stops it with ``request_stop``.

    Args:
        batches: makes a fresh iterable of batches (the collector's iterator).
        request_stop: asks that iterable to stop requesting and drain (it then ends).
        parts: the collector's shared parts: :meth:`start` needs its replay buffer and
            an open collector (``None``: no check, for tests).
    """

    def __init__(
        self,
        batches: Callable[[], Iterable[Any]],
        request_stop: Callable[[], None],
        *,
        parts: CollectorParts | None = None,
    ) -> None:
        self.parts = parts
        self._batches = batches
        self._request_stop = request_stop
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._hold_while: Callable[[], bool] | None = None
        self._stopping = threading.Event()
        #: seconds the thread held its requests (``hold_while``) since it was built
        self.held_s = 0.0

    @property
    def running(self) -> bool:
        """Whether the thread is collecting."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, *, hold_while: Callable[[], bool] | None = None) -> None:
        """Collects into ``replay_buffer`` in a background thread until ``total_frames``.

        Returns at once (a no-op while it runs); :meth:`pause` holds it, ``shutdown()``
        (or ``async_shutdown()``) stops it. An error in the background re-raises on
        the next ``start()``, ``stats()`` or ``shutdown()``.

        Args:
            hold_while: called (in the background thread) after each batch the
                workers wrote; while it returns ``True``, no new request is sent
                (the requests in flight finish, then the workers wait): the
                consumer of the buffer paces the writers, e.g. ``lambda: frames
                written - frames a learner took >= limit``. ``None``: the workers
                write as fast as they collect, as torchrl's do.

        Raises:
            RuntimeError: the collector has no ``replay_buffer``, or is shut down, or
                the previous run stopped on an error (its cause attached).
        """
        if self.parts is not None:
            if self.parts.config.replay_buffer is None:
                raise RuntimeError(
                    "start() collects into a replay buffer in the background, and this "
                    "collector has replay_buffer=None; pass replay_buffer=RayReplayBuffer(...) "
                    "(or ReplayBuffer(..., service_backend='ray')), or iterate the collector"
                )
            self.parts.check_open()
        self.raise_error()
        if self.running:
            return
        self._hold_while = hold_while
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._run, name="tdscheme-background-collection", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            for _ in self._batches():
                self._hold()
        except BaseException as err:  # noqa: BLE001 - kept for the driver, see raise_error
            first_line = str(err).split("\n", 1)[0]
            logger.error("background collection stopped: %s: %s", type(err).__name__, first_line)
            if isinstance(err, WorkerError):
                err.add_note("raised in the collector's background collection (start())")
            self._error = err

    def _hold(self) -> None:
        """Waits while ``hold_while()`` (polled every 5 ms), or until the thread is stopped."""
        if self._hold_while is None:
            return
        start = time.perf_counter()
        while not self._stopping.is_set() and self._hold_while():
            self._stopping.wait(0.005)
        self.held_s += time.perf_counter() - start

    def raise_error(self) -> None:
        """Re-raises (once) the error that stopped the thread, if any.

        A worker's failure is its :class:`~tdscheme.WorkerError` (worker id, remote
        traceback), as iteration raises it; any other error is a ``RuntimeError``
        naming it, the error attached.
        """
        error, self._error = self._error, None
        if error is None:
            return
        if isinstance(error, WorkerError):
            raise error
        raise RuntimeError(f"background collection failed: {error}") from error

    def stop(self, timeout_s: float) -> None:
        """Stops requesting, waits up to ``timeout_s`` for the requests in flight to drain.

        Raises:
            TimeoutError: the thread is still draining after ``timeout_s``.
        """
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._request_stop()
        self._stopping.set()  # a held thread goes on to drain
        thread.join(timeout=timeout_s)
        if thread.is_alive():
            raise TimeoutError(
                f"background collection did not drain its requests in flight within "
                f"timeout={timeout_s} s (a worker may be stalled)"
            )
        self._thread = None

    @contextlib.contextmanager
    def pause(self, timeout: float = 30.0, *, resume: bool = True) -> Iterator[None]:
        """Drains the writes in flight and holds background collection inside the block.

        The buffer's write count is frozen inside (a point to checkpoint at);
        collection resumes when the block exits unless ``resume=False``.

        Args:
            timeout: seconds to wait for the requests in flight to finish.
            resume: start again after the block (if it was running).

        Raises:
            TimeoutError: the requests in flight did not finish within ``timeout``.
        """
        was_running = self.running
        self.stop(timeout)
        try:
            yield
        finally:
            if resume and was_running:
                self.start(hold_while=self._hold_while)
