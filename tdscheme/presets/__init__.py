"""Named training runs for the ``tdscheme`` command and for examples.

``PRESETS`` maps a name to a function returning a fresh :class:`Preset`; every
setting of the preset can be overridden (``Preset.override``).

Example:
    >>> sorted(PRESETS)  # doctest: +NORMALIZE_WHITESPACE
    ['a2c-cartpole', 'a3c-cartpole', 'apex-dqn-cartpole', 'apex-dqn-pong', 'appo-cartpole',
     'appo-pong', 'dqn-cartpole', 'impala-cartpole', 'impala-pong', 'ppo-cartpole', 'ppo-cartpole-dd', 'ppo-mountaincar',
     'ppo-mountaincar-curriculum', 'ppo-pendulum', 'ppo-pendulum-curriculum', 'ppo-pong',
     'sac-halfcheetah', 'sac-pendulum', 'td3-pendulum']
    >>> preset = get_preset("ppo-cartpole").override({"total_frames": 10_000})
    >>> preset_from_dict(preset.to_dict()) == preset
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tdscheme.presets.a2c import a2c_cartpole, a2c_learner
from tdscheme.presets.curriculum import ppo_mountaincar_curriculum, ppo_pendulum_curriculum
from tdscheme.presets.grad_workers import a3c_cartpole, ppo_cartpole_dd
from tdscheme.presets.impala import appo_cartpole, impala_cartpole
from tdscheme.presets.offpolicy import (
    OffPolicyPreset,
    apex_dqn_cartpole,
    dqn_cartpole,
    sac_halfcheetah,
    sac_pendulum,
    td3_pendulum,
)
from tdscheme.presets.pong import apex_dqn_pong, appo_pong, impala_pong, ppo_pong
from tdscheme.presets.ppo import ppo_cartpole, ppo_learner, ppo_mountaincar, ppo_pendulum
from tdscheme.presets.preset import Preset
from tdscheme.presets.settings import ActorCriticConfig, OffPolicyConfig

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "ActorCriticConfig",
    "OffPolicyConfig",
    "OffPolicyPreset",
    "Preset",
    "a2c_learner",
    "get_preset",
    "ppo_learner",
    "preset_from_dict",
]

#: Preset names to functions returning a fresh preset.
PRESETS: dict[str, Callable[[], Preset]] = {
    "ppo-cartpole": ppo_cartpole,
    "a2c-cartpole": a2c_cartpole,
    "ppo-pendulum": ppo_pendulum,
    "ppo-pendulum-curriculum": ppo_pendulum_curriculum,
    "ppo-mountaincar": ppo_mountaincar,
    "ppo-mountaincar-curriculum": ppo_mountaincar_curriculum,
    "a3c-cartpole": a3c_cartpole,
    "ppo-cartpole-dd": ppo_cartpole_dd,
    "dqn-cartpole": dqn_cartpole,
    "apex-dqn-cartpole": apex_dqn_cartpole,
    "sac-pendulum": sac_pendulum,
    "td3-pendulum": td3_pendulum,
    "sac-halfcheetah": sac_halfcheetah,
    "impala-cartpole": impala_cartpole,
    "appo-cartpole": appo_cartpole,
    "impala-pong": impala_pong,
    "appo-pong": appo_pong,
    "ppo-pong": ppo_pong,
    "apex-dqn-pong": apex_dqn_pong,
}

#: The preset ``tdscheme train`` runs when none is named.
DEFAULT_PRESET = "ppo-cartpole"


def get_preset(name: Any) -> Preset:
    """A fresh preset by name.

    Raises:
        ValueError: ``name`` is not in ``PRESETS``.
    """
    if name not in PRESETS:
        raise ValueError(f"preset={name!r} is unknown; accepted: {sorted(PRESETS)}")
    return PRESETS[name]()


def preset_from_dict(data: Mapping[str, Any]) -> Preset:
    """Rebuilds a preset from ``Preset.to_dict()``: the named preset with the saved settings.

    Args:
        data: ``{"preset": name, "algo": {...}, "scheme": {...}, "trainer": {...}}``.

    Returns:
        The preset.

    Raises:
        ValueError: ``data`` names no known preset or holds an unknown or invalid setting.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"data must be a dict from Preset.to_dict(), got {type(data).__name__}")
    base = get_preset(data.get("preset"))
    values: dict[str, Any] = {}
    for section in ("algo", "scheme", "trainer"):
        values.update(data.get(section) or {})
    return base.override(values)
