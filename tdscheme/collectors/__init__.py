"""Remote torchrl collectors on Ray and the driver-side RayCollector."""

from __future__ import annotations

import typing

from tdscheme.lazy import lazy_exports

_EXPORTS = {
    "CollectorWorker": "tdscheme.collectors.worker.actor",
    "MASK_KEY": "tdscheme.keys",
    "POLICY_VERSION_KEY": "tdscheme.keys",
    "PreemptionConfig": "tdscheme.stragglers",
    "RayCollector": "tdscheme.collectors.ray_collector",
    "RayCollectorConfig": "tdscheme.collectors.config",
    "WORKER_ID_KEY": "tdscheme.keys",
    "WorkerSpec": "tdscheme.collectors.worker.spec",
}

__all__ = [
    "MASK_KEY",
    "POLICY_VERSION_KEY",
    "WORKER_ID_KEY",
    "CollectorWorker",
    "PreemptionConfig",
    "RayCollector",
    "RayCollectorConfig",
    "WorkerSpec",
]

if typing.TYPE_CHECKING:
    from tdscheme.collectors.config import RayCollectorConfig
    from tdscheme.collectors.ray_collector import RayCollector
    from tdscheme.collectors.worker.actor import CollectorWorker
    from tdscheme.collectors.worker.spec import WorkerSpec
    from tdscheme.keys import MASK_KEY, POLICY_VERSION_KEY, WORKER_ID_KEY
    from tdscheme.stragglers import PreemptionConfig

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
