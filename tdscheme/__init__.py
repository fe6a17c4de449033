"""tdscheme: TensorDict-native distributed reinforcement learning on Ray and torchrl.

The public names are imported lazily (PEP 562): a Ray worker that unpickles a
``tdscheme.collectors`` object imports only the collectors, not the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Learner": "tdscheme.learner",
    "LearnerConfig": "tdscheme.learner",
    "RayCollector": "tdscheme.collectors",
    "RayCollectorConfig": "tdscheme.collectors",
    "Scheme": "tdscheme.scheme",
    "SchemeConfig": "tdscheme.scheme",
    "Trainer": "tdscheme.engine",
    "TrainerConfig": "tdscheme.engine",
    "WorkerError": "tdscheme.collectors",
}

__all__ = [
    "Learner",
    "LearnerConfig",
    "RayCollector",
    "RayCollectorConfig",
    "Scheme",
    "SchemeConfig",
    "Trainer",
    "TrainerConfig",
    "WorkerError",
    "__version__",
]

if TYPE_CHECKING:
    from tdscheme.collectors import RayCollector, RayCollectorConfig, WorkerError
    from tdscheme.engine import Trainer, TrainerConfig
    from tdscheme.learner import Learner, LearnerConfig
    from tdscheme.scheme import Scheme, SchemeConfig


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tdscheme' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
