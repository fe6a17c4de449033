"""The driver process's side of a RayCollector: the only place that calls the worker actors.

* :mod:`~tdscheme.collectors.driver.pool`: the worker actors (the only Ray caller here).
* :mod:`~tdscheme.collectors.driver.flow`: first-ready and stacked order, the requests.
* :mod:`~tdscheme.collectors.driver.in_flight` and :mod:`~tdscheme.collectors.driver.ledger`:
  every request booked when sent and when resolved (the frame ledger).
* :mod:`~tdscheme.collectors.driver.liveness`: hung workers found by their progress.
* :mod:`~tdscheme.collectors.driver.stats`: ``stats()``'s counters and timers.
* :mod:`~tdscheme.collectors.driver.stacking`: stacked batches, padded after preemption.
* :mod:`~tdscheme.collectors.driver.weights` and
  :mod:`~tdscheme.collectors.driver.weight_schema`: weight pushes and their checks.
* :mod:`~tdscheme.collectors.driver.background`: collection in a thread (``start()``).
"""
