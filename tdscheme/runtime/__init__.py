"""The runtime room: starting or joining Ray, pools of actors, and torchrl's moving names.

* :mod:`~tdscheme.runtime.ray_lease`: the one place that starts or joins Ray.
* :mod:`~tdscheme.runtime.actor_pool`: slots of Ray actors with restarts, bounded
  calls and remote errors, shared by the collector and gradient-worker pools.
* :mod:`~tdscheme.runtime.torchrl_names`: where torchrl keeps the names that move
  between releases.

Only the Ray lease is imported here (the command's entry imports it before
anything heavy); import the other modules by their path.
"""

from __future__ import annotations

from tdscheme.runtime.ray_lease import WORKER_PRELOAD_MODULES, RayLease, local_ray_config

__all__ = ["WORKER_PRELOAD_MODULES", "RayLease", "local_ray_config"]
