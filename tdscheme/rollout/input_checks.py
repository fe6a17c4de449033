"""A worker's input checks: the policy's keys against the env's, and NaN / inf from the env, named.

Does the policy read what the env gives and write the env's action? Checked when a worker starts.

The check runs in each collector worker, on the env it has just built, before its
torchrl collector runs the policy: building an env on the driver as well would
cost a second env (an emulator, a simulator) and some envs exist only where the
workers run. A mismatch stops the construction of the collector with one message
listing the missing and extra keys (on the driver: a ``WorkerError`` naming the
worker), instead of torchrl's ``KeyError`` from inside the first rollout.

Example:
    >>> import torch
    >>> from tensordict.nn import TensorDictModule
    >>> from tdscheme.envs import make_env
    >>> env = make_env("Pendulum-v1")
    >>> linear = torch.nn.Linear(3, 1)
    >>> check_policy_keys(env, TensorDictModule(linear, ["observation"], ["action"]))
    >>> check_policy_keys(env, TensorDictModule(linear, ["obs"], ["action"]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: policy is invalid with in_keys ['obs'] that the env does not provide (missing ['obs']; the env provides ['done', 'observation', 'terminated', 'truncated']); accepted: ...
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdscheme.errors import NonFiniteInputError
from tdscheme.finite import first_bad_frame, nonfinite_keys

__all__ = [
    "check_policy_keys",
    "count_all_nonfinite",
    "describe_nonfinite",
    "env_output_error",
]

#: batches in a row that ``drop_nonfinite_frames`` drops whole before the worker is rebuilt
ALL_NONFINITE_LIMIT = 10


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


# -- NaN / inf from the env --------------------------------------------------------------
# A worker checks every batch before it sends it (describe_nonfinite: a warning naming the
# key, the worker and the step; the learner then skips or drops those frames), and when its
# policy raises it checks the env output the policy was given, so that a NaN observation is
# reported as one (NonFiniteInputError) instead of as torch's "probability tensor contains
# either inf, nan or element < 0".


def describe_nonfinite(td: TensorDictBase, *, worker_id: int, first_step: int) -> str | None:
    """``"non-finite values in 'x' (first at step N) from worker W"``, or ``None`` if all finite.

    Args:
        td: what the worker collected (or the env output the policy was given).
        worker_id: the worker.
        first_step: frames the worker collected before ``td`` (steps are counted
            from 1 over the worker's life, in frames).
    """
    keys = nonfinite_keys(td)
    if not keys:
        return None
    index = first_bad_frame(td)
    at = f" (first at step {first_step + (index or 0) + 1})"
    return f"non-finite values in {', '.join(keys)}{at} from worker {worker_id}"


def env_output_error(
    err: BaseException, *, env_keys: set[Any] | None, worker_id: int, first_step: int
) -> NonFiniteInputError | None:
    """The error to raise instead of ``err`` when the policy's input held NaN / inf from the env.

    The policy's input is found in ``err``'s traceback: the outermost frame with a
    TensorDict local named ``policy_input`` or ``tensordict`` (the collector's
    rollout, then the policy's ``forward``) that holds a non-finite env key. Only
    the env's keys (``env_keys``; all keys when ``None``) are named, not what the
    policy wrote into its input before failing.
    """
    for candidate, step_in_batch in _traceback_tensordicts(err):
        view = candidate
        if env_keys:
            present = [k for k in env_keys if k in candidate.keys(include_nested=True)]
            view = candidate.select(*present, strict=False)
        at = first_step + step_in_batch * max(1, candidate.batch_size.numel())
        described = describe_nonfinite(view, worker_id=worker_id, first_step=at)
        if described is not None:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            return NonFiniteInputError(
                f"the policy failed on {described}: the env returned them (the policy's "
                f"error: {type(err).__name__}: {first})"
            )
    return None


def _traceback_tensordicts(err: BaseException) -> list[tuple[TensorDictBase, int]]:
    """The TensorDicts the failing calls were given, outermost first, with the rollout's step.

    The step is the collector's loop index ``t`` (env steps into the batch) in that
    frame or the nearest outer frame that has one: torchrl's rollout hands the
    policy a TensorDict, tdscheme's lean rollout plain tensors, so the TensorDict may
    first appear inside the policy's own call.
    """
    found = []
    step = 0
    tb = err.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        if isinstance(local.get("t"), int):
            step = local["t"]
        for name in ("policy_input", "tensordict"):
            value = local.get(name)
            if isinstance(value, TensorDictBase):
                found.append((value, step))
        tb = tb.tb_next
    return found


def count_all_nonfinite(
    count: int, td: TensorDictBase, kept: TensorDictBase, *, worker_id: int, first_step: int
) -> int:
    """Batches in a row whose frames were all dropped for NaN / inf (``kept`` is what was left).

    Raises:
        NonFiniteInputError: the count reached :data:`ALL_NONFINITE_LIMIT`: such frames
            would be dropped for ever while the frame budget waits for them; the
            error rebuilds the worker (a fresh env and seed), as any env error.
    """
    all_bad = td.batch_size.numel() > 0 and kept.batch_size.numel() == 0
    count = count + 1 if all_bad else 0
    if count >= ALL_NONFINITE_LIMIT:
        described = describe_nonfinite(td, worker_id=worker_id, first_step=first_step)
        raise NonFiniteInputError(
            f"{ALL_NONFINITE_LIMIT} batches in a row held only frames with NaN or inf "
            f"(drop_nonfinite_frames dropped them all); the last one has {described}"
        )
    return count
