"""Does the policy read what the env gives and write the env's action? Checked when a worker starts.

The check runs in each collector worker, on the env it has just built, before its
torchrl collector runs the policy: building an env on the driver as well would
cost a second env (an emulator, a simulator) and some envs exist only where the
workers run. A mismatch stops the construction of the collector with one message
listing the missing and extra keys (on the driver: a ``WorkerError`` naming the
worker), instead of torchrl's ``KeyError`` from inside the first rollout.

Example:
    >>> from tdscheme.testing import bias_policy, make_env
    >>> env = make_env("Pendulum-v1")
    >>> check_policy_keys(env, bias_policy(3, 1))
    >>> check_policy_keys(env, bias_policy(3, 1, obs_key="obs"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: policy is invalid with in_keys ['obs'] that the env does not provide (missing ['obs']; the env provides ['done', 'observation', 'terminated', 'truncated']); accepted: ...
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_policy_keys"]


def _names(keys: Any) -> list[str]:
    return sorted(k if isinstance(k, str) else repr(tuple(k)) for k in keys)


def check_policy_keys(env: Any, policy: Any) -> None:
    """Raises if ``policy`` reads a key ``env`` does not provide, or does not write its action.

    Only policies that declare ``in_keys`` / ``out_keys`` (TensorDict modules) are
    checked; keys in any of the env's specs (observations, state, done flags) count
    as provided, so recurrent states and transforms' keys pass.

    Args:
        env: a torchrl env.
        policy: the policy the worker will run (``None``: a random policy, not checked).

    Raises:
        ValueError: naming the missing keys, the extra ones and what the env provides.
    """
    in_keys = getattr(policy, "in_keys", None)
    out_keys = getattr(policy, "out_keys", None)
    specs = [
        getattr(env, name, None) for name in ("observation_spec", "state_spec", "full_done_spec")
    ]
    if in_keys is None or any(spec is None for spec in specs):
        return
    provided = {k for spec in specs for k in spec.keys(True, True)}
    provided |= {(k,) if isinstance(k, str) else tuple(k) for k in provided}
    missing = [k for k in in_keys if k not in provided and _tuple(k) not in provided]
    if missing:
        raise ValueError(
            f"policy is invalid with in_keys {_names(in_keys)} that the env does not provide "
            f"(missing {_names(missing)}; the env provides {_names(k for k in provided if isinstance(k, str) or len(k) > 1)}); "
            f"accepted: a policy that reads the env's observation keys"
        )
    action_keys = list(getattr(env, "action_keys", []) or [])
    if out_keys is None or not action_keys:
        return
    written = {_tuple(k) for k in out_keys}
    absent = [k for k in action_keys if _tuple(k) not in written]
    if absent:
        extra = [k for k in out_keys if _tuple(k) not in {_tuple(a) for a in action_keys}]
        raise ValueError(
            f"policy is invalid with out_keys {_names(out_keys)} that miss the env's action "
            f"key(s) {_names(absent)} (extra: {_names(extra)}); accepted: a policy that writes "
            f"{_names(action_keys)}"
        )


def _tuple(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)
