"""The bottom of the collectors' room: a RayCollector's settings and the specs its workers are built from.

Nothing here imports the rest of ``collectors/`` (the worker, the driver, torchrl's
surface): they all read these.

* :mod:`~tdscheme.collectors.settings.config`: :class:`RayCollectorConfig`, every
  setting declared and checked once.
* :mod:`~tdscheme.collectors.settings.specs`: :class:`WorkerSpec` (what a worker is built
  from), :class:`WorkerBatch` (what it returns), and how the settings become specs.
* :mod:`~tdscheme.collectors.settings.torchrl_args`: torchrl's arguments about each
  worker's own collector and weight path, translated.
"""
