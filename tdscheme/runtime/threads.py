"""torch's threads in an actor's process: as many as Ray gave the actor.

Ray tells an actor how many CPUs it holds through ``OMP_NUM_THREADS``: when the actor
is placed, unless the variable is set already, Ray sets it to the floor of the actor's
``num_cpus`` (at least 1). torch reads it once, when it starts its thread pool. A worker
process of the local Ray tdscheme starts imports torch as soon as it is spawned (the
preload of :mod:`~tdscheme.runtime.ray_lease`), before Ray sets the variable, so its
pool had a thread per core of the machine whatever the actor held: two 1-CPU collector
actors on two cores ran four threads, and each small policy call paid for the thread it
did not own (CartPole's 2x64 MLP cost twice as much per step as in a 1-thread process).
:func:`match_ray_cpus`, called by each tdscheme actor as it starts in its own process,
sets torch's pool to what the variable says, as torch would have read it. Actors of
other libraries on that Ray keep torch's default (no Ray hook runs at an actor's placement;
a process's set-up hook runs at its spawn, before the variable), except torchrl's
Ray-held buffer, set at tdscheme's first write into it (:mod:`tdscheme.replay.ray_held`).
:func:`set_up_actor_process` is that call with the other first thing an actor does in its own
process: logging at its driver's level.

The driver's own process is the user's: :func:`warn_driver_threads` says once, at WARNING,
when its torch pool (the learner's) would share the machine's cores with the collector
workers (the Trainer sets one thread itself, ``TrainerConfig.num_threads``).
"""

from __future__ import annotations

import logging
import os

import torch

from tdscheme.log_levels import configure_worker_logging

__all__ = ["match_ray_cpus", "set_up_actor_process", "warn_driver_threads"]

logger = logging.getLogger(__name__)


def match_ray_cpus() -> int | None:
    """Sets torch's intra-op threads to ``OMP_NUM_THREADS``; returns the count, or ``None``.

    ``None`` (nothing changed) where the variable is unset or not a positive integer.
    Meant for an actor's own process (its constructor, in a Ray worker); an explicit
    setting made afterwards (a learner's ``num_threads``) still wins.

    Example:
        >>> import os, torch
        >>> from unittest import mock
        >>> threads = torch.get_num_threads()
        >>> with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "1"}):
        ...     match_ray_cpus(), torch.get_num_threads()
        (1, 1)
        >>> with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "all"}):
        ...     match_ray_cpus() is None
        True
        >>> torch.set_num_threads(threads)
    """
    value = os.environ.get("OMP_NUM_THREADS", "")
    try:
        threads = int(value)
    except ValueError:
        return None
    if threads < 1:
        return None
    if torch.get_num_threads() != threads:
        logger.debug("torch threads %d -> %d (OMP_NUM_THREADS)", torch.get_num_threads(), threads)
        torch.set_num_threads(threads)
    return threads


def set_up_actor_process(log_level: int | None) -> None:
    """What a tdscheme actor does first in its own process, before it builds anything.

    Sets this process's loggers to its driver's level
    (:func:`~tdscheme.log_levels.configure_worker_logging`), then torch's threads to
    Ray's CPUs (:func:`match_ray_cpus`: its preloaded torch has a thread per core).

    Args:
        log_level: the driver's log level; ``None`` (the actor's class used in-process)
            leaves logging and torch's threads alone.

    Example:
        >>> set_up_actor_process(None)  # in-process: nothing changes
    """
    if log_level is None:
        return
    configure_worker_logging(log_level)
    match_ray_cpus()


def warn_driver_threads(workers: int, cluster_cpus: float) -> bool:
    """Warns once when this process's torch threads and ``workers`` busy actors outnumber the CPUs.

    A learner's small networks update fastest on one thread beside busy collectors: a
    SAC update of sac-pendulum's networks took 57 ms on 2 threads and 13 ms on 1 with two
    busy processes on 2 cores (median of 6 rounds; 7 ms either way on an idle machine).

    Args:
        workers: the actors that step envs beside this process (collector workers).
        cluster_cpus: the CPUs of the Ray cluster (a cluster bigger than this machine
            places its workers elsewhere: no warning).

    Returns:
        Whether the warning applies (it is logged the first time only).
    """
    threads = torch.get_num_threads()
    applies = threads > 1 and workers > 0 and threads + workers > cluster_cpus
    if applies and not getattr(warn_driver_threads, "said", False):
        warn_driver_threads.said = True  # once a process
        logger.warning(
            "torch runs %d threads in this process (the learner's) beside %d collector "
            "workers on %g CPUs: the threads wait on each other; torch.set_num_threads(1) "
            "before the Scheme (the Trainer's num_threads=1 does it) updates small networks "
            "several times faster here", threads, workers, cluster_cpus,
        )  # fmt: skip
    return applies
