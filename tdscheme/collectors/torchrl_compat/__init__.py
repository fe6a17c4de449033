"""What exists only so that tdscheme's RayCollector is torchrl's: its names, calls and formats.

* :mod:`~tdscheme.collectors.torchrl_compat.args`: torchrl's arguments about each
  worker's collector and weight path.
* :mod:`~tdscheme.collectors.torchrl_compat.surface`: torchrl's attribute names.
* :mod:`~tdscheme.collectors.torchrl_compat.remote_calls`: ``map_fn``, ``get_distant_attr``.
* :mod:`~tdscheme.collectors.torchrl_compat.state`: torchrl's per-worker state format.
* :mod:`~tdscheme.collectors.torchrl_compat.learner_sync`: torchrl's Ray learner
  publishing weights straight to the workers.
"""
