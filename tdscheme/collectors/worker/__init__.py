"""What runs inside a collector worker's Ray actor; nothing here imports the driver's side.

* :mod:`~tdscheme.collectors.worker.actor`: :class:`CollectorWorker`, one torchrl
  collector stepped on request, its batches stamped and encoded.
* :mod:`~tdscheme.collectors.worker.spec`: what a worker is built from and returns.
* :mod:`~tdscheme.collectors.worker.progress`: the env steps it reports while it collects.
* :mod:`~tdscheme.collectors.worker.checks`: the policy's keys, NaN / inf from the env.
* :mod:`~tdscheme.collectors.worker.scheme_receiver`: torchrl's learner weight calls.
* :mod:`~tdscheme.collectors.worker.remote_calls`: torchrl RayCollector's ``map_fn`` /
  ``get_distant_attr`` calls.
"""

from __future__ import annotations

import typing

from tdscheme.lazy import lazy_exports

__all__ = ["WORKER_STATE_KEY", "CollectorWorker", "WorkerBatch", "WorkerSpec"]

if typing.TYPE_CHECKING:
    from tdscheme.collectors.worker.actor import WORKER_STATE_KEY, CollectorWorker
    from tdscheme.collectors.worker.spec import WorkerBatch, WorkerSpec

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "WORKER_STATE_KEY": "tdscheme.collectors.worker.actor",
        "CollectorWorker": "tdscheme.collectors.worker.actor",
        "WorkerBatch": "tdscheme.collectors.worker.spec",
        "WorkerSpec": "tdscheme.collectors.worker.spec",
    },
)
