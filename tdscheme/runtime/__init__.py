"""The runtime room: starting or joining Ray, pools of actors, and torchrl's moving names.

* :mod:`~tdscheme.runtime.ray_lease`: the one place that starts or joins Ray.
* :mod:`~tdscheme.runtime.actor_pool`: slots of Ray actors with restarts, bounded
  calls and remote errors, shared by the collector and gradient-worker pools.
* :mod:`~tdscheme.runtime.torchrl_names`: where torchrl keeps the names that move
  between releases.
* :mod:`~tdscheme.runtime.interrupts`: Ctrl-C and SIGTERM as a stop request.
* :mod:`~tdscheme.runtime.allreduce`: the gloo group and the weighted gradient
  all-reduce shared by decentralized gradient workers and learner groups.
* :mod:`~tdscheme.runtime.threads`: torch's threads in an actor's process set to the
  CPUs Ray gave the actor (its worker process imported torch before Ray said).

The Ray lease's names are exported lazily (:mod:`tdscheme.facades`): importing this
package imports no Ray, so the command installs its signal handlers
(``interrupts``) before anything heavy is imported. Import the other modules by
their path.
"""

from __future__ import annotations

from tdscheme.facades import lazy_exports

__all__ = ["WORKER_PRELOAD_MODULES", "RayLease", "local_ray_config"]

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "tdscheme.runtime.ray_lease"))
