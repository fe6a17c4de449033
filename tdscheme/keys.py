"""The frame keys every part of tdscheme shares.

Collector workers stamp every frame with where it came from; the learner, the
scheme's metrics and the replay paths read these keys.

Example:
    >>> WORKER_ID_KEY, POLICY_VERSION_KEY, MASK_KEY
    (('collector', 'worker_id'), ('collector', 'policy_version'), ('collector', 'mask'))
    >>> ENV_CONFIG_VERSION_KEY, ENV_TASK_KEY
    (('collector', 'env_config_version'), ('collector', 'env_task'))
"""

from __future__ import annotations

__all__ = [
    "DONE_KEYS",
    "ENV_CONFIG_VERSION_KEY",
    "ENV_TASK_KEY",
    "MASK_KEY",
    "POLICY_VERSION_KEY",
    "TRAJ_IDS_KEY",
    "WORKER_ID_KEY",
]

#: The collector worker that collected a frame.
WORKER_ID_KEY = ("collector", "worker_id")
#: The version of the policy weights a frame was collected with (+1 per weight push).
POLICY_VERSION_KEY = ("collector", "policy_version")
#: ``True`` for valid frames of a padded (preempted) rollout; absent when all are valid.
MASK_KEY = ("collector", "mask")
#: The version of the env config the env copy that produced a frame was running (+1 per
#: ``set_env_config`` push; 0 before any).
ENV_CONFIG_VERSION_KEY = ("collector", "env_config_version")
#: The index of the level (of a task distribution) the frame's env copy ran; -1 without one.
ENV_TASK_KEY = ("collector", "env_task")
#: torchrl's trajectory ids, per frame (its collectors' ``("collector", "traj_ids")``).
TRAJ_IDS_KEY = ("collector", "traj_ids")
#: The done keys of a torchrl env step (under ``"next"``), in torchrl's order.
DONE_KEYS = ("done", "terminated", "truncated")
