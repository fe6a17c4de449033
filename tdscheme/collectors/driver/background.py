"""BackgroundCollection: a RayCollector's collection in a thread of its own (``start()``).

With a replay buffer, workers write their frames into the buffer themselves;
the thread only drives the requests (weight pushes, restarts, the frame budget)
until ``total_frames`` or until it is stopped. :meth:`BackgroundCollection.pause`
drains what is in flight and holds the workers, so the buffer's write count is
frozen inside it (a quiescent point for a checkpoint). An error in the thread is
kept and re-raised on the driver at the next call, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["BackgroundCollection", "BackgroundCollectionMixin"]

logger = logging.getLogger(__name__)


class BackgroundCollection:
    """Runs ``batches()`` to exhaustion in a daemon thread; stops it with ``request_stop``.

    Args:
        batches: makes a fresh iterable of batches (the collector's iterator).
        request_stop: asks that iterable to stop requesting and drain (it then ends).
    """

    def __init__(
        self, batches: Callable[[], Iterable[Any]], request_stop: Callable[[], None]
    ) -> None:
        self._batches = batches
        self._request_stop = request_stop
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def running(self) -> bool:
        """Whether the thread is collecting."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Starts the thread (no-op while it runs).

        Raises:
            RuntimeError: the previous run stopped on an error (its cause attached).
        """
        self.raise_error()
        if self.running:
            return
        self._thread = threading.Thread(
            target=self._run, name="tdscheme-background-collection", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            for _ in self._batches():
                pass
        except BaseException as err:  # noqa: BLE001 - kept for the driver, see raise_error
            logger.error("background collection stopped: %s: %s", type(err).__name__, err)
            self._error = err

    def raise_error(self) -> None:
        """Re-raises (once) the error that stopped the thread, if any."""
        error, self._error = self._error, None
        if error is not None:
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
        thread.join(timeout=timeout_s)
        if thread.is_alive():
            raise TimeoutError(
                f"background collection did not drain its requests in flight within "
                f"timeout={timeout_s} s (a worker may be stalled)"
            )
        self._thread = None

    @contextlib.contextmanager
    def pause(self, timeout_s: float, *, resume: bool) -> Iterator[None]:
        """Drains and holds collection inside the ``with`` block; resumes after it if asked."""
        was_running = self.running
        self.stop(timeout_s)
        try:
            yield
        finally:
            if resume and was_running:
                self.start()


class BackgroundCollectionMixin:
    """torchrl's background surface of a RayCollector: ``start``, ``pause``, ``async_shutdown``.

    The host class has ``config`` (with ``replay_buffer``), ``_background`` (a
    :class:`BackgroundCollection`), ``_check_open()`` and ``shutdown()``.
    """

    config: Any
    _background: BackgroundCollection
    _check_open: Callable[[], None]
    shutdown: Callable[..., None]

    def start(self) -> None:
        """Collects into ``replay_buffer`` in a background thread until ``total_frames``.

        Returns at once; :meth:`pause` holds it, :meth:`shutdown` (or
        :meth:`async_shutdown`) stops it. An error in the background re-raises
        on the next :meth:`start`, :meth:`stats` or :meth:`shutdown`.

        Raises:
            RuntimeError: the collector has no ``replay_buffer``, or is shut down.
        """
        if self.config.replay_buffer is None:
            raise RuntimeError(
                "start() collects into a replay buffer in the background, and this collector "
                "has replay_buffer=None; pass replay_buffer=RayReplayBuffer(...) (or "
                "ReplayBuffer(..., service_backend='ray')), or iterate the collector instead"
            )
        self._check_open()
        self._background.start()

    @property
    def is_running(self) -> bool:
        """Whether background collection (:meth:`start`) is running."""
        return self._background.running

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
        with self._background.pause(timeout, resume=resume):
            yield

    async def async_shutdown(self, shutdown_ray: bool = False, timeout: float = 30.0) -> None:
        """:meth:`shutdown` without blocking the event loop (it runs in a thread)."""
        await asyncio.to_thread(self.shutdown, timeout, shutdown_ray=shutdown_ray)
