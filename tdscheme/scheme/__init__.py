"""The Scheme: a training run composed from factories, one driver per way of training.

* :mod:`~tdscheme.scheme.scheme`: the :class:`Scheme` facade and the driver surface;
* :mod:`~tdscheme.scheme.config`: :class:`SchemeConfig` and its one conversion into
  the lower layers' configs;
* :mod:`~tdscheme.scheme.collector_driver`: collect on Ray workers, learn on the driver;
* :mod:`~tdscheme.scheme.grad_worker_driver`: gradient workers;
* :mod:`~tdscheme.scheme.metrics`: the metric names every driver reports.
"""

from __future__ import annotations

from tdscheme.scheme.config import GRAD_COMMUNICATIONS, SchemeConfig
from tdscheme.scheme.metrics import episode_metrics
from tdscheme.scheme.scheme import Driver, Scheme

__all__ = ["GRAD_COMMUNICATIONS", "Driver", "Scheme", "SchemeConfig", "episode_metrics"]
