"""Remote torchrl collectors on Ray and the driver-side RayCollector."""

from __future__ import annotations

from tdscheme.collectors.config import RayCollectorConfig
from tdscheme.collectors.pool import WorkerError
from tdscheme.collectors.preemption import PreemptionConfig
from tdscheme.collectors.ray_collector import RayCollector
from tdscheme.collectors.worker import CollectorWorker, WorkerSpec
from tdscheme.keys import MASK_KEY, POLICY_VERSION_KEY, WORKER_ID_KEY

__all__ = [
    "MASK_KEY",
    "POLICY_VERSION_KEY",
    "WORKER_ID_KEY",
    "CollectorWorker",
    "PreemptionConfig",
    "RayCollector",
    "RayCollectorConfig",
    "WorkerError",
    "WorkerSpec",
]
