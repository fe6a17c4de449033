"""Gymnasium env ids, checked against gymnasium's registry before anything starts.

Light (it imports gymnasium only, not torch or torchrl), so the ``tdscheme``
command checks ``--env-id`` before it starts Ray, and a preset's config checks it
when it is built. :func:`missing_env_packages` names the extra an env needs
(``envpool``, ``atari``, ``mujoco``; ``video`` to render classic control) without
importing it.

Example:
    >>> check_env_id("CartPole-v1")
    >>> check_env_id("CartPole-v9")
    Traceback (most recent call last):
    ...
    ValueError: env_id='CartPole-v9' is invalid; accepted: a registered gymnasium env id (did you mean 'CartPole-v1', 'CartPole-v0', ...?); gymnasium says: ...`v9`...
"""

from __future__ import annotations

import difflib
import re

from tdscheme.validation import install_command, invalid, missing_extra

__all__ = [
    "ENV_BACKENDS",
    "check_env_id",
    "close_env_ids",
    "is_atari_id",
    "missing_env_packages",
]

#: The env backends of :func:`tdscheme.envs.make_env` (gymnasium's ids, or EnvPool's).
ENV_BACKENDS = ("gymnasium", "envpool")


def close_env_ids(env_id: str, *, n: int = 3) -> list[str]:
    """Registered gymnasium ids close to ``env_id`` (``difflib``), closest first."""
    from gymnasium.envs.registration import registry

    by_lower = {key.lower(): key for key in registry}
    matches = difflib.get_close_matches(env_id.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[m] for m in matches]


def check_env_id(env_id: object, *, name: str = "env_id") -> None:
    """Raises unless ``env_id`` is an id ``gymnasium.make`` finds (as ``gymnasium.spec`` does).

    Args:
        env_id: the id, e.g. ``"CartPole-v1"``.
        name: the argument's name in the message.

    Raises:
        ValueError: naming the id, the closest registered ids and gymnasium's reason.
    """
    if not isinstance(env_id, str) or not env_id:
        raise invalid(name, env_id, "a registered gymnasium env id such as 'CartPole-v1'")
    import gymnasium

    if env_id.startswith("ALE/"):  # Atari ids exist once ale-py registered them
        try:
            import ale_py
        except ImportError:
            raise invalid(
                name, env_id, f"an Atari id with ale-py installed ({install_command('atari')}), "
                "or EnvPool's backend (env_backend='envpool')",
            ) from None  # fmt: skip
        gymnasium.register_envs(ale_py)
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as err:
        close = close_env_ids(env_id)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise invalid(
            name, env_id, f"a registered gymnasium env id{hint}; gymnasium says: {err}"
        ) from None


def missing_env_packages(
    env_id: str, *, backend: str = "gymnasium", render: bool = False
) -> ImportError | None:
    """The error for an env whose optional packages are missing, or ``None``; imports none of them.

    Args:
        env_id: the env id (gymnasium's, or EnvPool's with ``backend="envpool"``).
        backend: ``"gymnasium"`` or ``"envpool"``.
        render: the env renders frames (videos: gymnasium's, whatever ``backend`` trains on).

    Returns:
        An ``ImportError`` naming the packages and the extra that installs them
        (``envpool``; ``atari``: ale-py and OpenCV; ``mujoco``; ``video``: pygame, which
        renders gymnasium's classic-control envs), or ``None``.

    Example:
        >>> missing_env_packages("CartPole-v1") is None
        True
    """
    if backend == "envpool" and not render:
        return missing_extra(
            "env_backend='envpool'", ["envpool"], "envpool", instead="env_backend='gymnasium'"
        )
    if env_id.startswith("ALE/"):
        what = f"{'videos of ' if render else ''}env_id={env_id!r} (Atari through gymnasium)"
        return missing_extra(what, ["ale_py", "cv2"], "atari")
    entry = entry_point(env_id)
    if entry.startswith("gymnasium.envs.mujoco"):
        return missing_extra(f"env_id={env_id!r} (MuJoCo)", ["mujoco"], "mujoco")
    if render and entry.startswith("gymnasium.envs.classic_control"):
        return missing_extra(f"videos of env_id={env_id!r}", ["pygame"], "video")
    return None


def entry_point(env_id: str) -> str:
    """gymnasium's entry point of ``env_id`` as a dotted name ("" when unknown).

    Example:
        >>> entry_point("CartPole-v1"), entry_point("NoSuchEnv-v0")
        ('gymnasium.envs.classic_control.cartpole:CartPoleEnv', '')
    """
    import gymnasium

    try:
        entry = gymnasium.spec(env_id).entry_point
    except gymnasium.error.Error:
        return ""
    return entry if isinstance(entry, str) else getattr(entry, "__module__", "") or ""


#: An Atari id of either backend: ``"ALE/Pong-v5"`` (gymnasium's) or ``"Pong-v5"`` (EnvPool's).
_ATARI_ID = re.compile(r"^(ALE/)?([A-Z][A-Za-z0-9]*)-v5$")


def is_atari_id(env_id: object) -> bool:
    """Whether ``env_id`` names an Atari game in gymnasium's ``ALE/`` namespace (pixels).

    The presets build such ids with :func:`~tdscheme.envs.make_atari_env`; EnvPool's bare
    ``"Pong-v5"`` is also a MuJoCo-like ``<Name>-v5`` form, so only ``ALE/`` says Atari.

    Example:
        >>> is_atari_id("ALE/Pong-v5"), is_atari_id("Pong-v5"), is_atari_id("HalfCheetah-v5")
        (True, False, False)
    """
    return isinstance(env_id, str) and env_id.startswith("ALE/") and bool(_ATARI_ID.match(env_id))
