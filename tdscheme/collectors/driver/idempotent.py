"""Calls on every collector worker that may be asked again: a death is a restart, not the end.

``state_dict``, ``load_state_dict`` and ``set_seed`` ask each worker for something
that asking twice does not change. When a worker dies during such a call (killed
while a checkpoint is taken, as the off-policy soak found), the pool rebuilds it as
any dead worker and the call is made again on every worker; a death past
``max_restarts`` is the pool's :class:`~tdscheme.WorkerError`, and any other error
(a worker raised, a worker did not answer) is raised at once. A user's own remote
calls (``call_remote``-style) are not asked again: they may not be idempotent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tdscheme.errors import ACTOR_DIED, WorkerError

if TYPE_CHECKING:
    from tdscheme.collectors.driver.pool import WorkerPool

__all__ = ["call_every_worker"]


def call_every_worker(
    pool: WorkerPool, method: str, args_per_worker: Sequence[tuple], timeout_s: float
) -> list[Any]:
    """``pool.call_all(method, ...)``, a worker that died rebuilt and the call made again.

    Raises:
        WorkerError: a worker raised or did not answer in ``timeout_s``, or died past
            ``max_restarts``.
    """
    while True:  # each death is a restart, and restarts end at max_restarts
        try:
            return pool.call_all(method, args_per_worker, timeout_s=timeout_s)
        except WorkerError as err:
            if err.remote_type != ACTOR_DIED:
                raise
            pool.restart(err.worker_id, f"died during {method} ({err})")
