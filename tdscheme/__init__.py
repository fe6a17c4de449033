"""tdscheme: TensorDict-native distributed reinforcement learning on Ray and torchrl.

The public names are imported lazily (PEP 562): a Ray worker that unpickles a
``tdscheme.collectors`` object imports only the collectors, not the engine.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

from tdscheme.facades import lazy_exports

try:
    __version__ = importlib.metadata.version("tdscheme")
except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "unknown"

_EXPORTS = {
    "Learner": "tdscheme.learner",
    "LearnerConfig": "tdscheme.learner",
    "RayCollector": "tdscheme.collectors",
    "RayCollectorConfig": "tdscheme.collectors",
    "Scheme": "tdscheme.scheme",
    "SchemeConfig": "tdscheme.scheme",
    "Trainer": "tdscheme.engine",
    "TrainerConfig": "tdscheme.engine",
    "WorkerError": "tdscheme.errors",
    "PlacementError": "tdscheme.errors",
    "ReplayBufferDied": "tdscheme.errors",
    "NonFiniteInputError": "tdscheme.errors",
    "NonFiniteUpdateError": "tdscheme.errors",
    "CheckpointError": "tdscheme.errors",
    "GradientWorkerError": "tdscheme.errors",
    "EvalWorkerError": "tdscheme.errors",
}

__all__ = [
    "CheckpointError",
    "EvalWorkerError",
    "GradientWorkerError",
    "Learner",
    "LearnerConfig",
    "NonFiniteInputError",
    "NonFiniteUpdateError",
    "PlacementError",
    "RayCollector",
    "RayCollectorConfig",
    "ReplayBufferDied",
    "Scheme",
    "SchemeConfig",
    "Trainer",
    "TrainerConfig",
    "WorkerError",
    "__version__",
]


if TYPE_CHECKING:
    from tdscheme.collectors import RayCollector, RayCollectorConfig
    from tdscheme.engine import Trainer, TrainerConfig
    from tdscheme.errors import WorkerError
    from tdscheme.learner import Learner, LearnerConfig
    from tdscheme.scheme import Scheme, SchemeConfig


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
