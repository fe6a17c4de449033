"""tdscheme: TensorDict-native distributed reinforcement learning on Ray and torchrl."""

from __future__ import annotations

from tdscheme.collectors import RayCollector, RayCollectorConfig, WorkerError

__version__ = "0.1.0"

__all__ = ["RayCollector", "RayCollectorConfig", "WorkerError", "__version__"]
