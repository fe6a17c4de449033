"""Remote torchrl collectors on Ray and the driver-side RayCollector."""

from __future__ import annotations

import typing

from tdscheme.facades import lazy_exports

_EXPORTS = {
    "CollectorWorker": "tdscheme.collectors.torchrl_compat.worker_calls",
    "MASK_KEY": "tdscheme.keys",
    "POLICY_VERSION_KEY": "tdscheme.keys",
    "PreemptionConfig": "tdscheme.stragglers",
    "RayCollector": "tdscheme.collectors.ray_collector",
    "RayCollectorConfig": "tdscheme.collectors.settings.config",
    "WORKER_ID_KEY": "tdscheme.keys",
    "WorkerSpec": "tdscheme.collectors.settings.specs",
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
    from tdscheme.collectors.ray_collector import RayCollector
    from tdscheme.collectors.settings.config import RayCollectorConfig
    from tdscheme.collectors.settings.specs import WorkerSpec
    from tdscheme.collectors.torchrl_compat.worker_calls import CollectorWorker
    from tdscheme.keys import MASK_KEY, POLICY_VERSION_KEY, WORKER_ID_KEY
    from tdscheme.stragglers import PreemptionConfig

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
