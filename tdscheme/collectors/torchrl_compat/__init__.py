"""What exists only so that tdscheme's RayCollector is torchrl's: its names, calls and formats.

The top of the collectors' room: it imports the settings, the worker and the driver,
and nothing below imports it. A run that uses none of torchrl's surface never goes
through it (the weight pushes stay the driver's plain pusher).

* :mod:`~tdscheme.collectors.torchrl_compat.surface`: torchrl's attribute names and calls.
* :mod:`~tdscheme.collectors.torchrl_compat.auto_push`: ``update_after_each_batch`` and
  ``max_weight_update_interval``.
* :mod:`~tdscheme.collectors.torchrl_compat.remote_calls`: ``map_fn``, ``get_distant_attr``.
* :mod:`~tdscheme.collectors.torchrl_compat.state`: torchrl's per-worker state format.
* :mod:`~tdscheme.collectors.torchrl_compat.learner_sync`: torchrl's Ray learner
  publishing weights straight to the workers, and policy services.
* :mod:`~tdscheme.collectors.torchrl_compat.worker_calls`: the calls torchrl makes on a
  worker actor, and the actor class a RayCollector starts.
"""
