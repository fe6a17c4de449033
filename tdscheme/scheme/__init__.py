"""The Scheme: a training run composed from factories, one driver per way of training.

* :mod:`~tdscheme.scheme.scheme`: the :class:`Scheme` facade;
* :mod:`~tdscheme.scheme.driver`: the :class:`Driver` protocol every driver implements,
  and the weight-push interval;
* :mod:`~tdscheme.scheme.factories`: the factories checked, the driver they make;
* :mod:`~tdscheme.scheme.state`: the state envelope and the older layouts it reads;
* :mod:`~tdscheme.scheme.config`: :class:`SchemeConfig` and its one conversion into
  the lower layers' configs;
* :mod:`~tdscheme.scheme.collector_driver`: collect on Ray workers, learn on the driver;
* :mod:`~tdscheme.scheme.grad_worker_driver`: gradient workers;
* :mod:`~tdscheme.scheme.offpolicy_driver`: a replay buffer between collectors and learner;
* :mod:`~tdscheme.scheme.async_driver`: IMPALA / APPO, first-ready batches paced by the learner;
* :mod:`~tdscheme.scheme.metrics`: the metric names every driver reports.
"""

from __future__ import annotations

import typing

from tdscheme.lazy import lazy_exports

_EXPORTS = {
    "Driver": "tdscheme.scheme.driver",
    "GRAD_COMMUNICATIONS": "tdscheme.scheme.config",
    "Scheme": "tdscheme.scheme.scheme",
    "SchemeConfig": "tdscheme.scheme.config",
    "episode_metrics": "tdscheme.scheme.metrics",
}

__all__ = ["GRAD_COMMUNICATIONS", "Driver", "Scheme", "SchemeConfig", "episode_metrics"]

if typing.TYPE_CHECKING:
    from tdscheme.scheme.config import GRAD_COMMUNICATIONS, SchemeConfig
    from tdscheme.scheme.driver import Driver
    from tdscheme.scheme.metrics import episode_metrics
    from tdscheme.scheme.scheme import Scheme

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
