"""NaN / inf in a TensorDict, found once: which keys, which frames, and how to name them.

Every part that meets a non-finite value uses this scan: a collector worker names
what its env returned (:mod:`tdscheme.collectors.worker.checks`), the driver refuses
non-finite weights before a push (:mod:`tdscheme.collectors.driver.weight_schema`),
the learner skips or drops (:mod:`tdscheme.learner.nonfinite`) and gradient workers
leave such gradients out (:mod:`tdscheme.gradient_workers.nonfinite`).

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> td = TensorDict(observation=torch.tensor([[0.0], [float("nan")]]), batch_size=[2])
    >>> nonfinite_keys(td), first_bad_frame(td), bad_frames(td).tolist()
    (["'observation'"], 1, [False, True])
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = [
    "bad_frames",
    "first_bad_frame",
    "key_name",
    "nonfinite_entries",
    "nonfinite_advice",
    "nonfinite_keys",
]


def nonfinite_advice(*, learner: str = "", frames_setting: str = "") -> str:
    """What to do about updates skipped for NaN / inf: the end of every error that stops a run.

    Args:
        learner: which learner's ``LearnerConfig`` sets the limit (``" of the driver's Learner"``).
        frames_setting: where ``drop_nonfinite_frames`` is set (``" (in ...)"``).

    Example:
        >>> print(nonfinite_advice(learner=" of the driver's Learner"))  # doctest: +NORMALIZE_WHITESPACE
        Check the env's observations and rewards (or the loss); LearnerConfig(max_nonfinite_updates=...)
        of the driver's Learner sets the limit, drop_nonfinite_frames=True drops such frames instead
        (tdscheme train: --max-nonfinite-updates, --drop-nonfinite-frames)
    """
    return (
        f"Check the env's observations and rewards (or the loss); LearnerConfig("
        f"max_nonfinite_updates=...){learner} sets the limit, drop_nonfinite_frames=True"
        f"{frames_setting} drops such frames instead (tdscheme train: --max-nonfinite-updates, "
        f"--drop-nonfinite-frames)"
    )


def key_name(key: str | tuple[str, ...]) -> str:
    """A printable key: ``'reward'`` or ``('next', 'reward')``."""
    return repr(key) if isinstance(key, str) else repr(tuple(key))


def _is_float(value: object) -> bool:
    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())


def nonfinite_entries(entries: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """The names whose floating-point tensor holds a NaN or an inf (one device sync per device).

    A CPU tensor of a dtype numpy has is checked by numpy (a tenth of torch's
    ``isfinite(...).all()`` on a batch's few thousand values, a fifth on pixels); any
    other through torch.

    Example:
        >>> nonfinite_entries([("a", torch.ones(2)), ("b", torch.tensor([float("inf")]))])
        ['b']
    """
    floats = [(name, value) for name, value in entries if _is_float(value)]
    if not floats:
        return []
    finite: list[bool | None] = [_finite_on_cpu(value) for _, value in floats]
    rest = [i for i, ok in enumerate(finite) if ok is None]
    if rest:
        checks = [torch.isfinite(floats[i][1]).all() for i in rest]
        if len({c.device for c in checks}) == 1:
            answers = torch.stack(checks).tolist()
        else:  # tensors on several devices: one sync per tensor
            answers = [bool(c) for c in checks]
        for i, ok in zip(rest, answers, strict=True):
            finite[i] = ok
    return [name for (name, _), ok in zip(floats, finite, strict=True) if not ok]


def _finite_on_cpu(value: torch.Tensor) -> bool | None:
    """Whether every element of a CPU tensor is finite, by numpy; ``None`` where numpy cannot see it."""
    if value.device.type != "cpu" or value.dtype == torch.bfloat16:
        return None
    try:
        array = value.detach().numpy()
    except (TypeError, RuntimeError):  # a tensor subclass, a conjugate view, ...
        return None
    return bool(np.isfinite(array).all())


def nonfinite_keys(td: TensorDictBase) -> list[str]:
    """The floating-point leaves of ``td`` holding a NaN or an inf, as printable names."""
    items = td.items(include_nested=True, leaves_only=True)
    return nonfinite_entries((key_name(key), value) for key, value in items)


def bad_frames(td: TensorDictBase) -> torch.Tensor:
    """A boolean mask of ``td``'s batch shape: the frames with a NaN or inf in a float leaf."""
    bad = torch.zeros(td.batch_size, dtype=torch.bool, device=td.device)
    dims = td.batch_dims
    for value in td.values(include_nested=True, leaves_only=True):
        if _is_float(value):
            finite = torch.isfinite(value.reshape(*value.shape[:dims], -1)).all(-1)
            bad |= ~finite.to(bad.device)
    return bad


def first_bad_frame(td: TensorDictBase) -> int | None:
    """The index (in ``td``'s flattened batch) of the first frame with a NaN or inf, or ``None``."""
    if not td.batch_dims:
        return 0 if nonfinite_keys(td) else None
    index = torch.nonzero(bad_frames(td).reshape(-1))
    return int(index[0]) if index.numel() else None
