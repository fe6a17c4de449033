"""The lean rollout: torchrl's ``Collector`` stepping plain gymnasium or EnvPool envs, no Ray.

Used inside collector workers (the default ``collector_class``) and inside gradient
workers alike, so it sits below both.

* :mod:`~tdscheme.rollout.lean`: :class:`LeanCollector`, the same frames as torchrl's
  ``Collector`` with a leaner loop, or torchrl's rollout where it cannot run.
* :mod:`~tdscheme.rollout.transforms`: the episode transforms it runs itself.
* :mod:`~tdscheme.rollout.observations`: how it reads each observation key.
* :mod:`~tdscheme.rollout.env_checks`: which envs it steps itself, and why not the others.
* :mod:`~tdscheme.rollout.env_steps`: how it steps and resets each kind of env.
* :mod:`~tdscheme.rollout.module_calls`: how it calls its policy each step.
* :mod:`~tdscheme.rollout.stamps`: a batch's constant per-frame stamps, written in place.
"""

from __future__ import annotations

import typing

from tdscheme.facades import lazy_exports

__all__ = ["LeanCollector"]

if typing.TYPE_CHECKING:
    from tdscheme.rollout.lean import LeanCollector

__getattr__, __dir__ = lazy_exports(__name__, {"LeanCollector": "tdscheme.rollout.lean"})
