"""A RayCollector's state in torchrl's format: one torchrl collector state per worker.

torchrl's ``RayCollector.state_dict()`` is a list with each remote collector's
``state_dict()`` (an ``OrderedDict``: ``env_state_dict``, ``policy_state_dict``,
``frames``, ``iter``, ...), and its ``load_state_dict`` takes such a list or one
state for every worker, loaded non-strictly. tdscheme's is the same list; each
entry also holds a ``"tdscheme"`` entry with what exact resume needs and torchrl's
collectors ignore (they load non-strictly too)::

    [OrderedDict(env_state_dict=..., policy_state_dict=..., frames=..., iter=...,
                 tdscheme={"policy_version": <this worker's>, "env_config": <its newest>,
                           "driver": {"frames": ..., "batches": ..., "policy_version": ...,
                                      "env_config_version": ...}}),
     ...]

So a tdscheme state loads into torchrl's RayCollector and a torchrl state into
tdscheme's (the driver counters are then left as they are). The format tdscheme
wrote before (``{"frames", "batches", "policy_version", "workers": [...]}``, found in
older checkpoints) still loads.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

from tdscheme.collectors.driver.stats import CollectorParts
from tdscheme.collectors.worker.actor import WORKER_STATE_KEY
from tdscheme.rollout.env_config import EnvConfigPush

__all__ = ["CollectorState", "driver_state", "worker_states"]

_DRIVER = "driver"
_LEGACY_KEYS = frozenset({"frames", "batches", "policy_version", "workers"})


def with_driver_state(
    workers: Sequence[Mapping[str, Any]],
    *,
    frames: int,
    batches: int,
    policy_version: int,
    env_config_version: int = 0,
) -> list[Any]:
    """The workers' states, each with the driver's counters added under ``"tdscheme"``.

    Example:
        >>> from collections import OrderedDict
        >>> state = with_driver_state([OrderedDict(frames=5, tdscheme={"policy_version": 1})],
        ...                           frames=5, batches=1, policy_version=2)
        >>> state[0]["tdscheme"]["driver"]
        {'frames': 5, 'batches': 1, 'policy_version': 2, 'env_config_version': 0}
    """
    driver = {
        "frames": frames, "batches": batches, "policy_version": policy_version,
        "env_config_version": env_config_version,
    }  # fmt: skip
    out = []
    for worker in workers:
        entry = collections.OrderedDict(worker)
        own = dict(entry.get(WORKER_STATE_KEY) or {})
        own[_DRIVER] = dict(driver)
        entry[WORKER_STATE_KEY] = own
        out.append(entry)
    return out


def worker_states(state_dict: Any, num_workers: int) -> list[Mapping[str, Any]]:
    """One state per worker, from any form ``RayCollector.load_state_dict`` accepts.

    Args:
        state_dict: a list of per-worker states (torchrl's and tdscheme's format),
            one state (a mapping) for every worker, a list of one state for every
            worker (as torchrl), or tdscheme's former format.
        num_workers: the collector's number of workers.

    Raises:
        ValueError: a list of neither one nor ``num_workers`` states.
        TypeError: ``state_dict`` is neither a mapping nor a list of mappings.

    Example:
        >>> [s["frames"] for s in worker_states([{"frames": 1}, {"frames": 2}], 2)]
        [1, 2]
        >>> [s["frames"] for s in worker_states({"frames": 3}, 2)]  # one for every worker
        [3, 3]
        >>> worker_states([{}, {}, {}], 2)
        Traceback (most recent call last):
        ...
        ValueError: state_dict has 3 worker states; accepted: one state for every worker, or 2 (one per worker)
    """
    if isinstance(state_dict, Mapping) and _LEGACY_KEYS <= set(state_dict):
        state_dict = _from_legacy(state_dict)
    states = [state_dict] if isinstance(state_dict, Mapping) else state_dict
    if not isinstance(states, (list, tuple)) or not all(isinstance(s, Mapping) for s in states):
        raise TypeError(
            f"state_dict of type {type(state_dict).__name__} is invalid; accepted: "
            f"RayCollector.state_dict() (a list of per-worker states) or one worker's state"
        )
    states = list(states)
    if len(states) == 1 and num_workers > 1:
        states *= num_workers
    if len(states) != num_workers:
        raise ValueError(
            f"state_dict has {len(states)} worker states; accepted: one state for every "
            f"worker, or {num_workers} (one per worker)"
        )
    return states


def driver_state(states: Sequence[Mapping[str, Any]]) -> dict[str, int] | None:
    """The driver counters saved with ``states`` (``None`` for a state torchrl saved).

    Example:
        >>> driver_state([{"tdscheme": {"driver": {"frames": 5, "batches": 1,
        ...                                        "policy_version": 2}}}])
        {'frames': 5, 'batches': 1, 'policy_version': 2, 'env_config_version': 0}
        >>> driver_state([{"frames": 5}]) is None
        True
    """
    for state in states:
        driver = (state.get(WORKER_STATE_KEY) or {}).get(_DRIVER)
        if driver is not None:
            counters = {k: int(driver[k]) for k in ("frames", "batches", "policy_version")}
            return {**counters, "env_config_version": int(driver.get("env_config_version", 0))}
    return None


def _with_env_config(state: Mapping[str, Any], push: EnvConfigPush | None) -> Mapping[str, Any]:
    """``state`` (not changed) with its worker's env config replaced by ``push``, decoded."""
    own = state.get(WORKER_STATE_KEY)
    if push is None or not own:
        return state
    out = collections.OrderedDict(state)
    out[WORKER_STATE_KEY] = {**own, "env_config": push}
    return out


def _from_legacy(state: Mapping[str, Any]) -> list[Any]:
    """tdscheme's former ``{"frames", "batches", "policy_version", "workers"}`` as the list form."""
    workers = []
    for worker in state["workers"]:
        entry = collections.OrderedDict(worker["collector"])
        entry[WORKER_STATE_KEY] = {"policy_version": int(worker["policy_version"])}
        workers.append(entry)
    return with_driver_state(
        workers,
        frames=int(state["frames"]),
        batches=int(state["batches"]),
        policy_version=int(state["policy_version"]),
    )


class CollectorState:
    """``state_dict`` / ``load_state_dict`` of a RayCollector, in torchrl's per-worker format.

    Args:
        parts: the collector's shared parts (settings, workers, counters).
    """

    def __init__(self, parts: CollectorParts) -> None:
        self.parts = parts

    def state_dict(self) -> list[Any]:
        """Every worker's torchrl collector state, in torchrl's format, with tdscheme's counters.

        Returns:
            A list with one ``OrderedDict`` per worker: its torchrl collector's
            ``state_dict()`` plus a ``"tdscheme"`` entry (the worker's policy
            version and the driver's frames, batches and policy version), see
            :mod:`tdscheme.collectors.torchrl_compat.state`.

        A worker that died (killed while the checkpoint was taken) is rebuilt,
        as any dead worker, and asked again: a checkpoint does not stop a run that
        a restart would keep going.

        Raises:
            WorkerError: a worker raised or did not answer in ``batch_timeout_s``,
                or died past ``max_restarts``.
        """
        parts = self.parts
        parts.check_open()
        # every env config pushed is in the workers' states (they answer in milliseconds)
        parts.pool.env_configs.wait(timeout_s=parts.config.batch_timeout_s)
        workers = parts.pool.call_every_worker(
            "state_dict", [()] * parts.num_workers, parts.config.batch_timeout_s
        )
        return with_driver_state(
            workers,
            frames=parts.stats.frames,
            batches=parts.stats.batches,
            policy_version=parts.pool.version,
            env_config_version=parts.pool.env_configs.version,
        )

    def load_state_dict(self, state_dict: Any) -> None:
        """Restores :meth:`state_dict`, or a torchrl ``RayCollector.state_dict()``.

        As torchrl's: a list of per-worker states, or one state loaded into every
        worker; each worker's torchrl collector loads it non-strictly
        (``strict=False``: what the state holds is loaded, the rest is left). The
        driver's frame and batch counters, policy version and env-config versions are
        restored when the state holds them (tdscheme's format, current or former).

        Raises:
            ValueError: a list of neither one nor ``num_collectors`` states, or env-config
                versions older than those this collector pushed (named per worker).
            TypeError: not a state dict.
            WorkerError: a worker could not load its state, or died past ``max_restarts``
                (one that dies before is rebuilt and loads it again).
        """
        parts = self.parts
        parts.check_open()
        states = worker_states(state_dict, parts.num_workers)
        driver = driver_state(states)
        env_configs = [(s.get(WORKER_STATE_KEY) or {}).get("env_config") for s in states]
        env_version = 0 if driver is None else driver["env_config_version"]
        # a plain torchrl state holds no env configs: the workers keep theirs, nothing to check
        holds_env_configs = driver is not None or any(c is not None for c in env_configs)
        if holds_env_configs:  # before any worker loads it: no version goes backwards
            parts.pool.env_configs.check_load(
                [0 if c is None else c["version"] for c in env_configs], env_version
            )
        # decoded here, where the classes and functions of the driver's __main__ import
        pushes = [None if c is None else EnvConfigPush.from_state(c) for c in env_configs]
        states = [_with_env_config(s, p) for s, p in zip(states, pushes, strict=True)]
        parts.pool.call_every_worker(  # a worker that dies meanwhile is rebuilt and loads it again
            "load_state_dict", [(s, False) for s in states], parts.config.batch_timeout_s
        )
        if holds_env_configs:
            parts.pool.env_configs.loaded(pushes, env_version)
        if driver is not None:
            parts.stats.batches = driver["batches"]
            # the restored run's frames, all yielded; the requests in flight stay booked
            parts.stats.ledger.reset_(yielded=driver["frames"])
            parts.pool.set_version(driver["policy_version"])
