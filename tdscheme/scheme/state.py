"""The Scheme's state envelope: its layout, the check of a state to load, older layouts read.

``Scheme.state_dict()`` is ``{"frames", "iterations", **loop.state_dict()}``: the
run's counters beside the driver's own state, which holds ``"learner"`` and the
loop's part under its ``state_key`` (``"collector"``, ``"grad_workers"``,
``"replay"``), and for loops that push weights the push counter,
``"updates_since_push"`` (:class:`~tdscheme.scheme.loop.PushInterval`).

:func:`upgrade_state` reads the layouts older versions saved; :func:`check_state`
names what a state to load lacks.

Example:
    >>> old = {"frames": 8, "iterations": 1, "learner": {},
    ...        "replay": {"updates": 2, "updates_since_push": 1}}
    >>> new = upgrade_state(old)
    >>> new["updates_since_push"], new["replay"]
    (1, {'updates': 2})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tdscheme.scheme.loop import PushInterval

__all__ = ["check_state", "upgrade_state"]

#: The keys every Scheme state holds besides the driver's part.
_COMMON_KEYS = frozenset({"learner", "frames", "iterations"})


def upgrade_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` in this version's layout (a shallow copy; ``state`` is not changed).

    * The off-policy loop saved its push counter inside its part,
      ``state["replay"]["updates_since_push"]``; it is now at the top level, where the
      on-policy loop has always saved it.

    Args:
        state: a state from ``Scheme.state_dict()`` of this or an older version.

    Returns:
        The same state in the current layout.
    """
    out = dict(state)
    replay = out.get("replay")
    key = PushInterval.STATE_KEY
    if isinstance(replay, Mapping) and key in replay:
        replay = dict(replay)
        out.setdefault(key, replay.pop(key))
        out["replay"] = replay
    return out


def check_state(state: Mapping[str, Any], *, state_key: str, num_grad_workers: int) -> None:
    """Raises unless ``state`` holds the counters, a learner and the driver's part.

    Args:
        state: the state to load.
        state_key: the loading loop's ``state_key``.
        num_grad_workers: the loading scheme's, named in the hint.

    Raises:
        ValueError: keys are missing; the message says when the state was saved by
            a scheme with (or without) gradient workers, unlike this one.
    """
    missing = (_COMMON_KEYS | {state_key}) - set(state)
    if not missing:
        return
    other = "grad_workers" if state_key == "collector" else "collector"
    hint = (
        f"; it was saved by a scheme {'with' if other == 'grad_workers' else 'without'} "
        f"gradient workers, this one has num_grad_workers={num_grad_workers}"
        if other in state
        else ""
    )
    raise ValueError(
        f"state is missing {sorted(missing)}{hint}; pass Scheme.state_dict() of a "
        f"scheme built the same way"
    )
