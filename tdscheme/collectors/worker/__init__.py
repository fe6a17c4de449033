"""What runs inside a collector worker's Ray actor; nothing here imports the driver's side.

* :mod:`~tdscheme.collectors.worker.actor`: :class:`BaseCollectorWorker`, one torchrl
  collector (:mod:`tdscheme.rollout.worker_collector`) stepped on request, its batches
  stamped, encoded, or written into a Ray-held replay buffer (:mod:`tdscheme.replay`).

torchrl's own calls on a worker actor are added on top, in
:mod:`~tdscheme.collectors.torchrl_compat.worker_calls`.
"""

from __future__ import annotations

import typing

from tdscheme.facades import lazy_exports

__all__ = ["WORKER_STATE_KEY", "BaseCollectorWorker"]

if typing.TYPE_CHECKING:
    from tdscheme.collectors.worker.actor import WORKER_STATE_KEY, BaseCollectorWorker

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "WORKER_STATE_KEY": "tdscheme.collectors.worker.actor",
        "BaseCollectorWorker": "tdscheme.collectors.worker.actor",
    },
)
