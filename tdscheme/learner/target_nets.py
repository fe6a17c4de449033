"""Target networks of off-policy losses: torchrl's ``SoftUpdate`` / ``HardUpdate``, and their state.

torchrl's off-policy losses (``DQNLoss``, ``SACLoss``, ``TD3Loss``, ``DDPGLoss``)
keep their target parameters inside the loss module (``target_*_params``), so a
loss's ``state_dict`` already holds them; the updater that moves them towards the
trained parameters is torchrl's. This module builds one by name and reads and
restores the little state it has (``HardUpdate``'s step counter), so that a resumed
run copies its targets at the same steps as an uninterrupted one.

Example:
    >>> import torch
    >>> from torchrl.modules import MLP, QValueActor
    >>> from torchrl.data import OneHot
    >>> from torchrl.objectives import DQNLoss
    >>> qnet = QValueActor(MLP(in_features=4, out_features=2, num_cells=[8]),
    ...                    in_keys=["observation"], spec=OneHot(2))
    >>> loss = DQNLoss(qnet, action_space="one-hot", delay_value=True)
    >>> updater = make_target_updater(loss, kind="hard", hard_update_interval=2)
    >>> type(updater).__name__, updater_state(updater)
    ('HardUpdate', {'kind': 'hard', 'counter': 0})
    >>> updater.step(); updater_state(updater)["counter"]
    1
    >>> make_target_updater(loss, kind="polyak")
    Traceback (most recent call last):
    ...
    ValueError: target_update='polyak' is invalid; accepted: 'soft', 'hard'
"""

from __future__ import annotations

from typing import Any

from torchrl.objectives import HardUpdate, LossModule, SoftUpdate
from torchrl.objectives.utils import TargetNetUpdater

from tdscheme.learner.config import TARGET_UPDATES
from tdscheme.validation import check_choice, check_int, check_positive_number, invalid

__all__ = ["TARGET_UPDATES", "load_updater_state", "make_target_updater", "updater_state"]


def make_target_updater(
    loss_module: LossModule,
    *,
    kind: str = "soft",
    tau: float = 0.005,
    hard_update_interval: int = 1000,
) -> TargetNetUpdater:
    """torchrl's target-network updater for ``loss_module``.

    Args:
        loss_module: an off-policy loss built with target networks
            (``delay_value=True`` / ``delay_qvalue=True`` / ``delay_actor=True``).
        kind: ``"soft"`` (torchrl's ``SoftUpdate``: ``target = (1 - tau) * target +
            tau * source`` after every optimizer step) or ``"hard"`` (``HardUpdate``:
            a copy every ``hard_update_interval`` steps).
        tau: the soft update's rate, in ``(0, 1]``.
        hard_update_interval: optimizer steps between hard copies, ``>= 1``.

    Returns:
        The updater; call ``step()`` after each optimizer step.

    Raises:
        ValueError: an unknown ``kind``, a value out of range, or a loss without
            target parameters (named in the message).
    """
    check_choice("target_update", kind, TARGET_UPDATES)
    if not any(name.startswith("target_") for name, _ in loss_module.named_buffers()) and not any(
        name.startswith("target_") for name, _ in loss_module.named_parameters()
    ):
        raise invalid(
            "loss_module", type(loss_module).__name__,
            "an off-policy loss built with target networks (e.g. DQNLoss(delay_value=True), "
            "SACLoss, TD3Loss, DDPGLoss)",
            context="it holds no target_* parameters",
        )  # fmt: skip
    if kind == "soft":
        check_positive_number("tau", tau)
        if tau > 1:
            raise invalid("tau", tau, "a number in (0, 1]")
        return SoftUpdate(loss_module, tau=tau)
    check_int("hard_update_interval", hard_update_interval, minimum=1)
    return HardUpdate(loss_module, value_network_update_interval=hard_update_interval)


def updater_state(updater: TargetNetUpdater | None) -> dict[str, Any] | None:
    """The updater's own state (the target parameters are in the loss's ``state_dict``).

    Returns:
        ``{"kind": "hard", "counter": steps since the last copy}``,
        ``{"kind": "soft"}``, or ``None`` without an updater.
    """
    if updater is None:
        return None
    if isinstance(updater, HardUpdate):
        return {"kind": "hard", "counter": int(updater.counter)}
    return {"kind": "soft" if isinstance(updater, SoftUpdate) else type(updater).__name__}


def load_updater_state(updater: TargetNetUpdater | None, state: dict[str, Any] | None) -> None:
    """Restores :func:`updater_state` into ``updater``.

    Raises:
        ValueError: the state was saved with another kind of updater (or none).
    """
    saved = None if state is None else state.get("kind")
    current = None if updater is None else updater_state(updater)["kind"]
    if saved != current:
        raise invalid(
            "state['target_updater']", state,
            f"the state of a {current or 'missing'} target updater, as this Learner has",
        )  # fmt: skip
    if isinstance(updater, HardUpdate):
        updater.counter = int(state["counter"])
