"""Gymnasium env ids, checked against gymnasium's registry before anything starts.

Light (it imports gymnasium only, not torch or torchrl), so the ``tdscheme``
command checks ``--env-id`` before it starts Ray, and a preset's config checks it
when it is built.

Example:
    >>> check_env_id("CartPole-v1")
    >>> check_env_id("CartPole-v9")
    Traceback (most recent call last):
    ...
    ValueError: env_id='CartPole-v9' is invalid; accepted: a registered gymnasium env id (did you mean 'CartPole-v1', 'CartPole-v0', ...?); gymnasium says: ...`v9`...
"""

from __future__ import annotations

import difflib

from tdscheme.validation import invalid

__all__ = ["ENV_BACKENDS", "check_env_id", "close_env_ids"]

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
                name, env_id, "an Atari id with ale-py installed (pip install 'tdscheme[atari]'), "
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
