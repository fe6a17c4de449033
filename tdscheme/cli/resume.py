"""What ``tdscheme train --resume RUN_DIR`` may change of the run's settings.

A resumed run loads its newest checkpoint into a scheme built from the run's
saved settings (``RUN_DIR/config.json``) and the options given now. Options that
shape the checkpoint (the env, the networks, the kind of training) must not
change: each one that does is named in one usage error. Options whose run value
is safe to keep (the number of collectors and envs: the checkpoint holds their
state) are adopted from the run, with a note. Everything else (frames,
evaluation, logging, checkpoints, timeouts, resources, loss coefficients) may
change.

Example:
    >>> from tdscheme.presets import get_preset
    >>> saved = get_preset("ppo-cartpole")
    >>> kept, notes, errors = resume_overrides(
    ...     saved, {"total_frames": 10, "num_collectors": 9, "hidden_sizes": (8,)}, "runs/x")
    >>> kept
    {'total_frames': 10}
    >>> notes[0]
    "--num-collectors 9 ignored: the run in runs/x has num_collectors=2 (its checkpoint holds the collectors' state); resuming with 2"
    >>> errors[0]
    'argument --hidden-sizes: hidden_sizes=(8,) differs from the run in runs/x, which has (64, 64); --resume cannot change it (the checkpoint was saved with it); accepted: (64, 64), or a new run without --resume'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tdscheme.cli.options import option_name

__all__ = ["ADOPTED", "MUST_MATCH", "resume_overrides"]

#: Settings that shape what the checkpoint holds (networks, learner state, driver kind).
MUST_MATCH = (
    "env_id", "hidden_sizes", "activation", "anneal_lr", "device",
    "num_grad_workers", "grad_communication", "decentralized",
)  # fmt: skip
#: Settings whose run value is kept (with a note) when a different one is given.
ADOPTED = ("num_collectors", "num_envs")


def _same(a: Any, b: Any) -> bool:
    norm = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731
    return norm(a) == norm(b)


def resume_overrides(
    saved: Any, overrides: Mapping[str, Any], run_dir: str
) -> tuple[dict[str, Any], list[str], list[str]]:
    """Splits the options given with ``--resume`` into kept ones, notes and errors.

    Args:
        saved: the run's :class:`~tdscheme.presets.Preset` (from its ``config.json``).
        overrides: the settings given on the command line.
        run_dir: the run directory, for the messages.

    Returns:
        ``(overrides to apply, notes on adopted run values, usage errors)``.
    """
    owners = saved.setting_owners()
    kept: dict[str, Any] = {}
    notes: list[str] = []
    errors: list[str] = []
    for name, value in overrides.items():
        if name not in owners:
            kept[name] = value  # the preset's override reports it
            continue
        ran = getattr(getattr(saved, owners[name]), name)
        if _same(value, ran) or name not in MUST_MATCH + ADOPTED:
            kept[name] = value
        elif name in ADOPTED:
            notes.append(
                f"{option_name(name)} {value} ignored: the run in {run_dir} has {name}={ran} "
                f"(its checkpoint holds the collectors' state); resuming with {ran}"
            )
        else:
            shown = tuple(value) if isinstance(value, list) else value
            errors.append(
                f"argument {option_name(name)}: {name}={shown!r} differs from the run in "
                f"{run_dir}, which has {ran!r}; --resume cannot change it (the checkpoint was "
                f"saved with it); accepted: {ran!r}, or a new run without --resume"
            )
    return kept, notes, errors
