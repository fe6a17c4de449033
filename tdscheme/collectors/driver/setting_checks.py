"""The checks of a RayCollectorConfig's plain settings: numbers, flags and option dicts.

Each bad value is a clear error naming the argument, the value and what is accepted
(:func:`tdscheme.validation.invalid`), raised when the config is built, before any
actor starts.

Example:
    >>> from types import SimpleNamespace
    >>> check_scalar_settings(SimpleNamespace(frames_per_batch=0))
    Traceback (most recent call last):
    ...
    ValueError: frames_per_batch=0 is invalid; accepted: an int >= 1
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tdscheme.runtime.ray_lease import check_init_keys
from tdscheme.runtime.ray_options import check_actor_options
from tdscheme.validation import (
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
    invalid,
)

__all__ = ["check_scalar_settings"]


def check_scalar_settings(config: Any) -> None:
    """Checks the numbers, flags and option dicts of a ``RayCollectorConfig``.

    Raises:
        ValueError: a value out of its range (naming the argument).
        TypeError: a value of the wrong type (naming the argument).
    """
    check_int("frames_per_batch", config.frames_per_batch, minimum=1)
    tf = config.total_frames
    if isinstance(tf, bool) or not isinstance(tf, int) or not (tf > 0 or tf == -1):
        raise invalid("total_frames", tf, "an int > 0, or -1 for no limit")
    check_int("num_collectors", config.num_collectors, minimum=1, optional=True)
    check_int("max_policy_lag", config.max_policy_lag, minimum=0, optional=True)
    check_int("prefetch_batches", config.prefetch_batches, minimum=0, optional=True)
    check_int("max_restarts", config.max_restarts, minimum=0)
    check_int("trajs_per_batch", config.trajs_per_batch, minimum=1, optional=True)
    check_int("num_workers_per_collector", config.num_workers_per_collector, minimum=1)
    mw = config.max_weight_update_interval
    if isinstance(mw, bool) or not isinstance(mw, int) or mw < -1:
        raise invalid("max_weight_update_interval", mw, "-1 (never forced) or an int >= 0")
    check_positive_number("batch_timeout_s", config.batch_timeout_s)
    check_positive_number("actor_start_timeout_s", config.actor_start_timeout_s)
    if config.worker_stall_timeout_s is not None:
        check_positive_number("worker_stall_timeout_s", config.worker_stall_timeout_s)
    check_int("min_workers", config.min_workers, minimum=1, optional=True)
    check_int("seed", config.seed, minimum=0, optional=True)
    for name in ("max_frames_per_traj", "init_random_frames"):
        check_int(name, getattr(config, name), minimum=-1, optional=True)
    for name in ("reset_at_each_iter", "split_trajs", "sync", "update_after_each_batch"):
        check_bool(name, getattr(config, name))
    check_choice("placement", config.placement, ("check", "wait"))
    check_bool("drop_nonfinite_frames", config.drop_nonfinite_frames)
    if config.drop_nonfinite_frames and config.replay_buffer is None:
        raise invalid(
            "drop_nonfinite_frames", True, "False", context="replay_buffer=None (batches come "
            "to you: drop frames in your loop, or with LearnerConfig(drop_nonfinite_frames=True))",
        )  # fmt: skip
    if config.ray_init_config is not None:
        if not isinstance(config.ray_init_config, Mapping):
            raise invalid("ray_init_config", config.ray_init_config, "None or a dict")
        check_init_keys(config.ray_init_config)
    for name in ("remote_configs", "collector_kwargs"):
        value = getattr(config, name)
        for i, entry in enumerate(value if isinstance(value, (list, tuple)) else [value]):
            where = f"{name}[{i}]" if isinstance(value, (list, tuple)) else name
            if name == "remote_configs" and entry is not None:
                check_actor_options(where, entry)
            elif entry is not None and not isinstance(entry, Mapping):
                raise invalid(where, entry, "None, a dict, or a list of dicts")
