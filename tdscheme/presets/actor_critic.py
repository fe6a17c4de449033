"""Envs, actor-critic networks and hyperparameters shared by the PPO and A2C presets.

Everything here is a module-level function of plain arguments, so that
``functools.partial`` of it pickles by reference into Ray workers.

Example:
    >>> modules = actor_critic_modules("CartPole-v1", hidden_sizes=(8,))
    >>> sorted(modules)
    ['actor', 'critic']
    >>> env = train_env("CartPole-v1", num_envs=2)
    >>> td = modules["actor"](env.reset())
    >>> td["action"].shape
    torch.Size([2, 2])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.data import Bounded, Categorical, OneHot
from torchrl.envs import (
    Compose,
    DoubleToFloat,
    EnvBase,
    RewardScaling,
    RewardSum,
    StepCounter,
    TransformedEnv,
)
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, TanhNormal, ValueOperator

from tdscheme.env_ids import check_env_id
from tdscheme.envs import BACKENDS, make_env

__all__ = ["ACTIVATIONS", "ActorCriticConfig", "actor_critic_modules", "eval_env", "train_env"]

#: Hidden-layer activations by name.
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


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
        if self.env_backend not in BACKENDS:
            raise ValueError(
                f"env_backend={self.env_backend!r} is invalid; accepted: {', '.join(BACKENDS)}"
            )
        if self.env_backend == "gymnasium":  # EnvPool has its own ids, checked by EnvPool
            check_env_id(self.env_id)
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation={self.activation!r} is invalid; accepted: {sorted(ACTIVATIONS)}"
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


def train_env(
    env_id: str, *, num_envs: int = 1, reward_scale: float = 1.0, backend: str = "gymnasium"
) -> EnvBase:
    """A training env: ``num_envs`` batched copies that record episode return and length.

    Args:
        env_id: a gymnasium env id.
        num_envs: copies stepped together in this process.
        reward_scale: multiplies the reward the learner sees; ``("next",
            "episode_reward")`` sums the unscaled rewards.
        backend: :func:`tdscheme.envs.make_env`'s ``backend``.

    Returns:
        A torchrl env with ``RewardSum`` and ``StepCounter`` transforms.
    """
    env = make_env(env_id, num_envs=num_envs, backend=backend)
    transforms = [*_float32(env), RewardSum(), StepCounter()]
    if reward_scale != 1.0:
        transforms.append(RewardScaling(loc=0.0, scale=reward_scale))
    return TransformedEnv(env, Compose(*transforms))


def eval_env(env_id: str, *, num_envs: int = 1, backend: str = "gymnasium") -> EnvBase:
    """An evaluation env: ``num_envs`` batched copies with the env's own rewards.

    Args:
        env_id: a gymnasium env id.
        num_envs: copies stepped together.
        backend: :func:`tdscheme.envs.make_env`'s ``backend``.

    Returns:
        A torchrl env (float64 observations as float32, as in training).
    """
    env = make_env(env_id, num_envs=num_envs, backend=backend)
    transforms = _float32(env)
    return TransformedEnv(env, Compose(*transforms)) if transforms else env


def _float32(env: EnvBase) -> list[DoubleToFloat]:
    """torchrl's ``DoubleToFloat`` when the env observes float64 (MuJoCo does); else nothing.

    The presets' networks are float32, as torchrl's sota-implementations' are.
    """
    spec = env.observation_spec
    double = any(leaf.dtype == torch.float64 for leaf in spec.values(True, True))
    return [DoubleToFloat()] if double else []


def actor_critic_modules(
    env_id: str,
    *,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    backend: str = "gymnasium",
) -> dict[str, nn.Module]:
    """A stochastic actor and a separate critic for ``env_id``'s spaces.

    Discrete actions get a one-hot categorical policy over logits; box actions a
    tanh-squashed normal bounded by the action space, with a state-dependent scale.

    Args:
        env_id: a gymnasium env id (one env is built to read its specs).
        hidden_sizes: hidden layers of each network.
        activation: ``"tanh"``, ``"relu"`` or ``"elu"``.
        backend: :func:`tdscheme.envs.make_env`'s ``backend`` (EnvPool's discrete
            actions are indices: a categorical policy).

    Returns:
        ``{"actor": ProbabilisticActor, "critic": ValueOperator}``.

    Raises:
        ValueError: the observation is not flat or the action space is neither
            discrete nor a box.
    """
    probe = make_env(env_id, backend=backend)
    try:
        obs_shape = probe.observation_spec_unbatched["observation"].shape
        action_spec = probe.action_spec_unbatched
    finally:
        probe.close()
    if len(obs_shape) != 1:
        raise ValueError(
            f"env_id={env_id!r} has observations of shape {tuple(obs_shape)}; accepted: flat"
        )
    act = ACTIVATIONS[activation]
    obs_dim = obs_shape[0]

    def mlp(out_features: int) -> MLP:
        return MLP(
            in_features=obs_dim, out_features=out_features, num_cells=list(hidden_sizes),
            activation_class=act,
        )  # fmt: skip

    critic = ValueOperator(mlp(1), in_keys=["observation"])
    if isinstance(action_spec, OneHot):
        n = action_spec.shape[-1]
        head = TensorDictModule(mlp(n), in_keys=["observation"], out_keys=["logits"])
        actor = ProbabilisticActor(
            head, in_keys=["logits"], out_keys=["action"], distribution_class=OneHotCategorical,
            spec=OneHot(n), return_log_prob=True,
        )  # fmt: skip
    elif isinstance(action_spec, Categorical) and action_spec.ndim == 0:
        n = action_spec.space.n
        head = TensorDictModule(mlp(n), in_keys=["observation"], out_keys=["logits"])
        actor = ProbabilisticActor(
            head, in_keys=["logits"], out_keys=["action"], distribution_class=torch.distributions.Categorical,
            spec=Categorical(n), return_log_prob=True,
        )  # fmt: skip
    elif isinstance(action_spec, Bounded) and action_spec.ndim == 1:
        n = action_spec.shape[-1]
        net = nn.Sequential(mlp(2 * n), NormalParamExtractor())
        head = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
        actor = ProbabilisticActor(
            head, in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal,
            distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
            spec=action_spec.clone(), return_log_prob=True,
        )  # fmt: skip
    else:
        raise ValueError(
            f"env_id={env_id!r} has action spec {type(action_spec).__name__}; accepted: "
            f"a discrete (one-hot or index) or a 1-D box action"
        )
    _init_policy_head(actor)
    return {"actor": actor, "critic": critic}


def _init_policy_head(actor: nn.Module) -> None:
    """Scales the actor's last layer down, so the initial policy is near uniform (CleanRL)."""
    last = [m for m in actor.modules() if isinstance(m, nn.Linear)][-1]
    with torch.no_grad():
        last.weight.mul_(0.01)
        last.bias.zero_()


def linear_lr_schedule(
    optimizer: torch.optim.Optimizer, *, total_updates: int, end_factor: float = 0.0
) -> torch.optim.lr_scheduler.LRScheduler:
    """Decays the learning rate linearly to ``lr * end_factor`` over ``total_updates`` updates.

    Args:
        optimizer: the learner's optimizer.
        total_updates: learner updates over which to decay (``>= 1``).
        end_factor: the final fraction of the initial learning rate, in ``[0, 1]``.

    Returns:
        A ``torch.optim.lr_scheduler.LinearLR``.

    Example:
        >>> opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
        >>> schedule = linear_lr_schedule(opt, total_updates=4)
        >>> lrs = []
        >>> for _ in range(4):
        ...     opt.step()
        ...     schedule.step()
        ...     lrs.append(round(opt.param_groups[0]["lr"], 2))
        >>> lrs
        [0.75, 0.5, 0.25, 0.0]
    """
    return torch.optim.lr_scheduler.LinearLR(
        optimizer, start_factor=1.0, end_factor=end_factor, total_iters=max(1, total_updates)
    )
