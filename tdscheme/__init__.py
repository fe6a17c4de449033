"""tdscheme: TensorDict-native distributed reinforcement learning on Ray and torchrl.

The public names are imported lazily (PEP 562): a Ray worker that unpickles a
``tdscheme.collectors`` object imports only the collectors, not the engine.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tdscheme.lazy import lazy_exports

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


def _silence_gym_notice() -> None:
    """Keeps gym's import banner out of every tdscheme process's stderr.

    No tdscheme extra installs the old ``gym`` any more (EnvPool 0.8 needed it,
    1.2 does not), but where it is installed torchrl imports it, so each process
    that imports torchrl (the driver and every worker) would print gym's four-line
    deprecation notice; tdscheme uses gymnasium, never gym. The notice lives in ``gym_notices``, read once
    by ``gym``'s ``__init__``; emptying it before that import silences it.
    """
    if "gym" in sys.modules:
        return
    try:
        from gym_notices import notices
    except ImportError:
        return
    notices.notices.clear()


_silence_gym_notice()

if TYPE_CHECKING:
    from tdscheme.collectors import RayCollector, RayCollectorConfig, WorkerError
    from tdscheme.engine import Trainer, TrainerConfig
    from tdscheme.learner import Learner, LearnerConfig
    from tdscheme.scheme import Scheme, SchemeConfig


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
