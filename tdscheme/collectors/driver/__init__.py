"""The driver process's side of a RayCollector: the worker actors, the batches' order, the counts.

Above :mod:`~tdscheme.collectors.settings`; it names no worker module (the actor class
is given to the pool by the collector that builds it).

* :mod:`~tdscheme.collectors.driver.pool`: the worker actors, their restarts, weight
  pushes and acknowledgements (the driver's Ray caller).
* :mod:`~tdscheme.collectors.driver.flow`: first-ready and stacked order, the requests,
  stacked batches padded after preemption.
* :mod:`~tdscheme.collectors.driver.replies`: waiting for the replies; deaths, stalls and
  stale batches resolved.
* :mod:`~tdscheme.collectors.driver.budget`: what ``total_frames`` still allows.
* :mod:`~tdscheme.collectors.driver.in_flight` and :mod:`~tdscheme.collectors.driver.ledger`:
  every request booked when sent and when resolved (the frame ledger).
* :mod:`~tdscheme.collectors.driver.liveness`: hung workers found by their progress.
* :mod:`~tdscheme.collectors.driver.stats`: what the collector's parts share, and ``stats()``.
* :mod:`~tdscheme.collectors.driver.weights` and
  :mod:`~tdscheme.collectors.driver.weight_schema`: weight pushes and their checks.
* :mod:`~tdscheme.collectors.driver.background`: collection in a thread (``start()``).
"""
