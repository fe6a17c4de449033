"""Finding NaN / inf in what an env returned, and naming it: key, worker, step.

A collector worker checks every batch before it sends it
(:func:`describe_nonfinite`: a warning naming the key, the worker and the step;
the learner then skips or drops those frames, see
:mod:`tdscheme.learner.nonfinite`), and when its policy raises it checks the env
output the policy was given, so that a NaN observation is reported as one
(:class:`NonFiniteInputError`) instead of as torch's "probability tensor
contains either inf, nan or element < 0".

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> td = TensorDict(observation=torch.tensor([[0.0], [float("nan")]]), batch_size=[2])
    >>> nonfinite_keys(td)
    ['observation']
    >>> describe_nonfinite(td, worker_id=1, first_step=100)
    "non-finite values in 'observation' (first at step 102) from worker 1"
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["NonFiniteInputError", "describe_nonfinite", "first_bad_frame", "nonfinite_keys"]


class NonFiniteInputError(RuntimeError):
    """An env returned NaN or inf where the policy reads it (the policy then failed)."""


def _key_name(key: str | tuple[str, ...]) -> str:
    return repr(key) if isinstance(key, str) else repr(tuple(key))


def nonfinite_keys(td: TensorDictBase) -> list[str]:
    """The floating-point leaves of ``td`` holding a NaN or an inf, as printable names."""
    found = []
    for key, value in td.items(include_nested=True, leaves_only=True):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            if not bool(torch.isfinite(value).all()):
                found.append(key if isinstance(key, str) else _key_name(key))
    return found


def first_bad_frame(td: TensorDictBase) -> int | None:
    """The index (in ``td``'s flattened batch) of the first frame with a NaN or inf, or ``None``."""
    if not td.batch_dims:
        return 0 if nonfinite_keys(td) else None
    flat = td.reshape(-1)
    bad = torch.zeros(flat.shape[0], dtype=torch.bool)
    for value in flat.values(include_nested=True, leaves_only=True):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            bad |= ~torch.isfinite(value.reshape(flat.shape[0], -1)).all(-1)
    index = torch.nonzero(bad)
    return int(index[0]) if index.numel() else None


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
    names = ", ".join(repr(k) if not k.startswith("(") else k for k in keys)
    return f"non-finite values in {names}{at} from worker {worker_id}"


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
