"""The training engine: the Trainer and its building blocks.

Example:
    >>> from tdscheme.engine import Trainer, TrainerConfig
    >>> TrainerConfig(total_frames=1000).logger
    'csv'
"""

from __future__ import annotations

from tdscheme.engine.checkpoint import CheckpointError, CheckpointManager
from tdscheme.engine.evaluation import EvalResult, evaluate
from tdscheme.engine.plot import plot_learning_curve
from tdscheme.engine.progress import Progress
from tdscheme.engine.run_log import RunLogger, read_metrics
from tdscheme.engine.seeding import rng_state, seed_everything, set_rng_state, worker_seeds
from tdscheme.engine.trainer import Trainer, TrainerConfig

__all__ = [
    "CheckpointError",
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
