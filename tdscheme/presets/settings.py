"""The presets' algorithm settings: plain dataclasses, checked without torch.

:class:`ActorCriticConfig` (PPO, A2C) and :class:`OffPolicyConfig` (DQN, SAC,
TD3, DDPG) hold a preset's env, network and loss hyperparameters; each value is
checked when the config is made. Nothing here imports torch, so that the
``tdscheme`` command checks every setting before it starts Ray (the networks
they describe are built in :mod:`~tdscheme.presets.actor_critic` and
:mod:`~tdscheme.presets.offpolicy_modules`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tdscheme.env_ids import ENV_BACKENDS, check_env_id
from tdscheme.learner.config import TARGET_UPDATES
from tdscheme.validation import check_bool, check_choice, check_int, invalid

__all__ = ["ACTIVATION_NAMES", "OFFPOLICY_ALGOS", "ActorCriticConfig", "OffPolicyConfig"]

#: The hidden-layer activations a preset's networks accept, by name.
ACTIVATION_NAMES = ("elu", "relu", "tanh")

#: The off-policy algorithms the presets build (torchrl's losses of the same names).
OFFPOLICY_ALGOS = ("dqn", "sac", "td3", "ddpg")


@dataclasses.dataclass
class ActorCriticConfig:
    """Env, network and loss hyperparameters of an actor-critic preset (PPO or A2C).

    Args:
        env_id: a gymnasium env id with a flat observation and a discrete or box action
            (with ``env_backend="envpool"``: an EnvPool id).
        env_backend: ``"gymnasium"`` (default) or ``"envpool"``
            (:func:`tdscheme.envs.make_env`'s ``backend``).
        num_envs: envs each collector worker steps in one batch (gymnasium's sync
            vector env); more envs per process means more frames per second.
        eval_num_envs: envs stepped together during evaluation.
        hidden_sizes: hidden layers of the actor and of the (separate) critic.
        activation: ``"tanh"``, ``"relu"`` or ``"elu"``.
        gamma: discount.
        gae_lambda: GAE's lambda.
        lr: Adam learning rate.
        anneal_lr: decay the learning rate linearly to ``lr * lr_end_factor`` over
            ``anneal_frames`` frames, then keep it there.
        anneal_frames: frames over which the learning rate decays; ``None``: the
            run's ``total_frames``.
        lr_end_factor: the final learning rate as a fraction of ``lr``.
        num_epochs: passes over each batch.
        minibatch_size: frames per optimizer step (``None``: the whole batch).
        max_grad_norm: gradient clipping (``None``: none).
        clip_epsilon: PPO's ratio clip (ignored by A2C).
        entropy_coef: weight of the entropy bonus.
        critic_coef: weight of the value loss.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        normalize_advantage: standardize advantages per minibatch (PPO).
        reward_scale: multiply training rewards by this (episode returns are logged
            unscaled).
        device: where the learner trains (``"cpu"``, ``"cuda"``).

    Raises:
        ValueError: a value out of range, naming the field, its value and what is accepted.

    Example:
        >>> ActorCriticConfig(lr=1e-3).hidden_sizes
        (64, 64)
    """

    env_id: str = "CartPole-v1"
    env_backend: str = "gymnasium"
    num_envs: int = 16
    eval_num_envs: int = 10
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    gamma: float = 0.99
    gae_lambda: float = 0.95
    lr: float = 3e-4
    anneal_lr: bool = True
    anneal_frames: int | None = None
    lr_end_factor: float = 0.0
    num_epochs: int = 4
    minibatch_size: int | None = 256
    max_grad_norm: float | None = 0.5
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.01
    critic_coef: float = 0.5
    loss_critic_type: str = "l2"
    normalize_advantage: bool = True
    reward_scale: float = 1.0
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(self.hidden_sizes)
        for name in ("num_envs", "eval_num_envs", "num_epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid; accepted: an int >= 1")
        af = self.anneal_frames
        if af is not None and (isinstance(af, bool) or not isinstance(af, int) or af < 1):
            raise ValueError(f"anneal_frames={af!r} is invalid; accepted: None or an int >= 1")
        if not self.hidden_sizes or any(
            isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.hidden_sizes
        ):
            raise ValueError(
                f"hidden_sizes={self.hidden_sizes!r} is invalid; accepted: ints >= 1, e.g. (64, 64)"
            )
        if self.env_backend not in ENV_BACKENDS:
            raise ValueError(
                f"env_backend={self.env_backend!r} is invalid; accepted: {', '.join(ENV_BACKENDS)}"
            )
        if self.env_backend == "gymnasium":  # EnvPool has its own ids, checked by EnvPool
            check_env_id(self.env_id)
        if self.activation not in ACTIVATION_NAMES:
            raise ValueError(
                f"activation={self.activation!r} is invalid; accepted: {sorted(ACTIVATION_NAMES)}"
            )
        for name, low, high in (
            ("gamma", 0.0, 1.0),
            ("gae_lambda", 0.0, 1.0),
            ("lr_end_factor", 0.0, 1.0),
        ):
            value = getattr(self, name)
            if not _is_number(value) or not low <= value <= high:
                raise ValueError(
                    f"{name}={value!r} is invalid; accepted: a number in [{low}, {high}]"
                )
        for name in ("lr", "clip_epsilon", "reward_scale"):
            if not _is_number(getattr(self, name)) or not getattr(self, name) > 0:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid; accepted: a number > 0"
                )
        for name in ("entropy_coef", "critic_coef"):
            if not _is_number(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid; accepted: a number >= 0"
                )
        if self.loss_critic_type not in ("l2", "l1", "smooth_l1"):
            raise ValueError(
                f"loss_critic_type={self.loss_critic_type!r} is invalid; accepted: "
                f"'l2', 'l1', 'smooth_l1'"
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclasses.dataclass
class OffPolicyConfig:
    """Env, network, loss, replay and exploration hyperparameters of an off-policy preset.

    Args:
        env_id: a gymnasium env id with a flat observation (discrete actions for
            DQN, a 1-D box for SAC, TD3 and DDPG).
        env_backend: ``"gymnasium"`` (default) or ``"envpool"`` (the same id in EnvPool's
            threads; see :func:`tdscheme.envs.make_env`).
        num_envs: envs each collector worker steps in one batch.
        eval_num_envs: envs stepped together during evaluation.
        hidden_sizes: hidden layers of the actor and of each Q-network.
        activation: ``"tanh"``, ``"relu"`` or ``"elu"``.
        gamma: discount.
        lr: Adam learning rate (one optimizer over every trained parameter).
        max_grad_norm: gradient clipping (``None``: none).
        batch_size: frames per gradient step (the replay buffer's sample size).
        buffer_size: frames the replay buffer holds (the oldest are overwritten).
        prioritized: prioritized replay (torchrl's ``PrioritizedSampler``, the loss's
            ``td_error`` written back after every step); driver-held buffers only.
        priority_alpha: prioritized replay's exponent on priorities.
        priority_beta: prioritized replay's importance-sampling exponent.
        target_update: ``"soft"`` (torchrl's ``SoftUpdate`` every step) or ``"hard"``
            (``HardUpdate``, a copy every ``hard_update_interval`` steps).
        tau: the soft update's rate.
        hard_update_interval: gradient steps between hard target copies.
        eps_init: DQN: initial epsilon of the epsilon-greedy policy.
        eps_end: DQN: final epsilon.
        exploration_frames: frames over which epsilon (DQN) or the action noise
            (TD3, DDPG) anneals to its end value.
        noise_sigma: TD3 / DDPG: initial std of the Gaussian action noise, as a
            fraction of the action range's half-width.
        noise_sigma_end: TD3 / DDPG: final std of the action noise.
        reward_scale: multiply training rewards by this (episode returns are logged
            unscaled).
        device: where the learner trains (``"cpu"``, ``"cuda"``).

    Raises:
        ValueError: a value out of range, naming the field, its value and what is accepted.

    Example:
        >>> OffPolicyConfig(env_id="Pendulum-v1").batch_size
        256
        >>> OffPolicyConfig(tau=0)
        Traceback (most recent call last):
        ...
        ValueError: tau=0 is invalid; accepted: a number in (0, 1]
    """

    env_id: str = "CartPole-v1"
    env_backend: str = "gymnasium"
    num_envs: int = 8
    eval_num_envs: int = 10
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "relu"
    gamma: float = 0.99
    lr: float = 3e-4
    max_grad_norm: float | None = None
    batch_size: int = 256
    buffer_size: int = 100_000
    prioritized: bool = False
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    target_update: str = dataclasses.field(default="soft", metadata={"choices": TARGET_UPDATES})
    tau: float = 0.005
    hard_update_interval: int = 500
    eps_init: float = 1.0
    eps_end: float = 0.05
    exploration_frames: int = 10_000
    noise_sigma: float = 0.1
    noise_sigma_end: float = 0.1
    reward_scale: float = 1.0
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(self.hidden_sizes)
        for name in ("num_envs", "eval_num_envs", "batch_size", "buffer_size"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("hard_update_interval", self.hard_update_interval, minimum=1)
        check_int("exploration_frames", self.exploration_frames, minimum=1)
        if not self.hidden_sizes or any(
            isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.hidden_sizes
        ):
            raise invalid("hidden_sizes", self.hidden_sizes, "ints >= 1, e.g. (64, 64)")
        check_choice("activation", self.activation, sorted(ACTIVATION_NAMES))
        check_choice("env_backend", self.env_backend, ENV_BACKENDS)
        if self.env_backend == "gymnasium":  # EnvPool has its own ids, checked by EnvPool
            check_env_id(self.env_id)
        check_choice("target_update", self.target_update, TARGET_UPDATES)
        check_bool("prioritized", self.prioritized)
        for name, low, high, low_open in (
            ("gamma", 0.0, 1.0, False),
            ("tau", 0.0, 1.0, True),
            ("eps_init", 0.0, 1.0, False),
            ("eps_end", 0.0, 1.0, False),
            ("priority_alpha", 0.0, 1.0, False),
            ("priority_beta", 0.0, 1.0, False),
        ):
            value = getattr(self, name)
            inside = _is_number(value) and (
                low < value <= high if low_open else low <= value <= high
            )
            if not inside:
                bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
                raise invalid(name, value, f"a number in {bounds}")
        for name in ("lr", "reward_scale"):
            if not _is_number(getattr(self, name)) or not getattr(self, name) > 0:
                raise invalid(name, getattr(self, name), "a number > 0")
        for name in ("noise_sigma", "noise_sigma_end"):
            if not _is_number(getattr(self, name)) or getattr(self, name) < 0:
                raise invalid(name, getattr(self, name), "a number >= 0")
        if self.max_grad_norm is not None and not (
            _is_number(self.max_grad_norm) and self.max_grad_norm > 0
        ):
            raise invalid("max_grad_norm", self.max_grad_norm, "None or a number > 0")
