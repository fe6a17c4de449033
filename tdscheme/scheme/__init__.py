"""The Scheme: a training run composed from factories, one training loop per way of training.

* :mod:`~tdscheme.scheme.scheme`: the :class:`Scheme` facade;
* :mod:`~tdscheme.scheme.loop`: the :class:`TrainingLoop` protocol every loop implements,
  and the weight-push interval;
* :mod:`~tdscheme.scheme.factories`: the factories checked, the loop they make;
* :mod:`~tdscheme.scheme.state`: the state envelope and the older layouts it reads;
* :mod:`~tdscheme.scheme.config`: :class:`SchemeConfig` and its one conversion into
  the lower layers' configs;
* :mod:`~tdscheme.scheme.on_policy_loop`: collect on Ray workers, learn on the driver;
* :mod:`~tdscheme.scheme.grad_worker_loop`: gradient workers;
* :mod:`~tdscheme.scheme.off_policy_loop`: a replay buffer between collectors and learner;
* :mod:`~tdscheme.scheme.async_loop`: IMPALA / APPO, first-ready batches paced by the learner;
* :mod:`~tdscheme.scheme.metrics`: the metric names every loop reports.
"""

from __future__ import annotations

import typing

from tdscheme.facades import lazy_exports

_EXPORTS = {
    "TrainingLoop": "tdscheme.scheme.loop",
    "GRAD_COMMUNICATIONS": "tdscheme.scheme.config",
    "Scheme": "tdscheme.scheme.scheme",
    "SchemeConfig": "tdscheme.scheme.config",
    "episode_metrics": "tdscheme.scheme.metrics",
}

__all__ = ["GRAD_COMMUNICATIONS", "TrainingLoop", "Scheme", "SchemeConfig", "episode_metrics"]

if typing.TYPE_CHECKING:
    from tdscheme.scheme.config import GRAD_COMMUNICATIONS, SchemeConfig
    from tdscheme.scheme.loop import TrainingLoop
    from tdscheme.scheme.metrics import episode_metrics
    from tdscheme.scheme.scheme import Scheme

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
