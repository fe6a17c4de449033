"""The training engine: the Trainer and its building blocks.

Example:
    >>> from tdscheme.engine import Trainer, TrainerConfig
    >>> TrainerConfig(total_frames=1000).logger
    'csv'
"""

from __future__ import annotations

import typing

from tdscheme.facades import lazy_exports

_EXPORTS = {
    "CheckpointManager": "tdscheme.engine.checkpoint",
    "EvalResult": "tdscheme.engine.evaluation",
    "Progress": "tdscheme.engine.progress",
    "RunLogger": "tdscheme.engine.run_log",
    "Trainer": "tdscheme.engine.trainer",
    "TrainerConfig": "tdscheme.engine.trainer",
    "evaluate": "tdscheme.engine.evaluation",
    "plot_learning_curve": "tdscheme.engine.plot",
    "read_metrics": "tdscheme.engine.run_log",
    "rng_state": "tdscheme.engine.seeding",
    "seed_everything": "tdscheme.engine.seeding",
    "set_rng_state": "tdscheme.engine.seeding",
    "worker_seeds": "tdscheme.engine.seeding",
}

__all__ = [
    "CheckpointManager",
    "EvalResult",
    "Progress",
    "RunLogger",
    "Trainer",
    "TrainerConfig",
    "evaluate",
    "plot_learning_curve",
    "read_metrics",
    "rng_state",
    "seed_everything",
    "set_rng_state",
    "worker_seeds",
]

if typing.TYPE_CHECKING:
    from tdscheme.engine.checkpoint import CheckpointManager
    from tdscheme.engine.evaluation import EvalResult, evaluate
    from tdscheme.engine.plot import plot_learning_curve
    from tdscheme.engine.progress import Progress
    from tdscheme.engine.run_log import RunLogger, read_metrics
    from tdscheme.engine.seeding import rng_state, seed_everything, set_rng_state, worker_seeds
    from tdscheme.engine.trainer import Trainer, TrainerConfig

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
