"""Actor-critic networks and the learner shared by the PPO and A2C presets (their envs: preset_envs).

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

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.data import Bounded, Categorical, OneHot
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import LossModule
from torchrl.objectives.value import GAE

from tdscheme.learner import Learner, LearnerConfig
from tdscheme.learner.values import OnePassValues
from tdscheme.learner.vtrace import vtrace_estimator
from tdscheme.presets.pixel_networks import pixel_actor_critic
from tdscheme.presets.preset_envs import configured_env, eval_env, train_env
from tdscheme.presets.settings import ActorCriticConfig

__all__ = [
    "ACTIVATIONS",
    "ActorCriticConfig",
    "actor_critic_learner",
    "actor_critic_modules",
    "advantage_estimator",
    "configured_env",
    "eval_env",
    "linear_lr_schedule",
    "actor_critic_loss_learner",
    "train_env",
]

#: Hidden-layer activations by name (the names :data:`~tdscheme.presets.settings.ACTIVATION_NAMES`).
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def actor_critic_modules(
    env_id: str,
    *,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    backend: str = "gymnasium",
    pixel_network: str = "shallow",
) -> dict[str, nn.Module]:
    """A stochastic actor and a separate critic for ``env_id``'s spaces.

    Discrete actions get a one-hot categorical policy over logits; box actions a
    tanh-squashed normal bounded by the action space, with a state-dependent scale.
    Stacked frames (an Atari id) get a CNN (``pixel_network``), one trunk shared by the
    actor and the critic (:func:`~tdscheme.presets.pixel_networks.pixel_actor_critic`;
    ``hidden_sizes`` and ``activation`` are the MLP's and not used).

    Args:
        env_id: a gymnasium env id (one env is built to read its specs).
        hidden_sizes: hidden layers of each network.
        activation: ``"tanh"``, ``"relu"`` or ``"elu"``.
        backend: :func:`tdscheme.envs.make_env`'s ``backend`` (EnvPool's discrete
            actions are indices: a categorical policy).
        pixel_network: the CNN for stacked frames, ``"shallow"`` or ``"nature"``.

    Returns:
        ``{"actor": ProbabilisticActor, "critic": ValueOperator}``.

    Raises:
        ValueError: the observation is not flat or the action space is neither
            discrete nor a box.
    """
    probe = eval_env(env_id, backend=backend)
    try:
        obs_shape = probe.observation_spec_unbatched["observation"].shape
        action_spec = probe.action_spec_unbatched
    finally:
        probe.close()
    if len(obs_shape) == 3 and isinstance(action_spec, Categorical):  # stacked frames
        return pixel_actor_critic(
            action_spec.space.n, frame_shape=tuple(obs_shape), network=pixel_network
        )
    if len(obs_shape) != 1:
        raise ValueError(
            f"env_id={env_id!r} has observations of shape {tuple(obs_shape)}; accepted: flat, "
            f"or stacked frames [C, H, W] with discrete actions"
        )
    act = ACTIVATIONS[activation]

    def mlp(out_features: int) -> MLP:
        return MLP(in_features=obs_shape[0], out_features=out_features,
                   num_cells=list(hidden_sizes), activation_class=act)  # fmt: skip

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


def actor_critic_learner(
    loss: LossModule,
    critic: nn.Module,
    *,
    config: ActorCriticConfig,
    total_updates: int | None = None,
) -> Learner:
    """Wraps an actor-critic loss in a Learner with its advantage estimator and optimizer.

    Args:
        loss: e.g. ``ClipPPOLoss`` or ``A2CLoss``, built over ``critic``.
        critic: the value network the estimator uses (the one the loss trains).
        config: advantage (GAE or V-trace), optimizer and minibatch hyperparameters.
        total_updates: learner updates of the whole run; with ``config.anneal_lr``
            the learning rate decays linearly over them.

    Returns:
        The Learner.
    """
    scheduler = None
    if config.anneal_lr and total_updates:
        scheduler = partial(
            linear_lr_schedule, total_updates=total_updates, end_factor=config.lr_end_factor
        )
    return Learner(
        loss,
        optimizer=partial(torch.optim.Adam, lr=config.lr, eps=config.adam_eps),
        config=LearnerConfig(
            num_epochs=config.num_epochs,
            minibatch_size=config.minibatch_size,
            max_grad_norm=config.max_grad_norm,
            lr=config.lr,
            device=config.device,
            max_nonfinite_updates=config.max_nonfinite_updates,
            drop_nonfinite_frames=config.drop_nonfinite_frames,
        ),
        value_estimator=advantage_estimator(loss, critic, config=config),
        lr_scheduler=scheduler,
    )


def advantage_estimator(
    loss: LossModule, critic: nn.Module, *, config: ActorCriticConfig
) -> OnePassValues:
    """``config.advantage``'s estimator: torchrl's ``GAE`` or ``VTrace``, fed ``critic``'s values
    in one pass over the batch (:class:`~tdscheme.learner.values.OnePassValues`).

    V-trace compares the policy the loss trains (``loss.actor_network``) with the
    behaviour log-probs each frame carries (the actor's ``action_log_prob``, recorded
    by the worker that collected it), both on the action the frame took
    (:func:`~tdscheme.learner.vtrace.vtrace_estimator`).

    Example:
        >>> from torchrl.objectives import A2CLoss
        >>> modules = actor_critic_modules("CartPole-v1", hidden_sizes=(8,))
        >>> loss = A2CLoss(modules["actor"], modules["critic"])
        >>> config = ActorCriticConfig(advantage="vtrace", vtrace_rho_clip=2.0)
        >>> estimator = advantage_estimator(loss, modules["critic"], config=config)
        >>> type(estimator.estimator).__name__, estimator.estimator.rho_thresh.item()
        ('VTrace', 2.0)
    """
    estimator = (
        vtrace_estimator(gamma=config.gamma, actor=loss.actor_network, critic=None,
                         rho_clip=config.vtrace_rho_clip, c_clip=config.vtrace_c_clip)
        if config.advantage == "vtrace"
        else GAE(gamma=config.gamma, lmbda=config.gae_lambda, value_network=None)
    )  # fmt: skip
    return OnePassValues(estimator, critic)


def actor_critic_loss_learner(
    loss_class: Callable[..., LossModule],
    *,
    actor: nn.Module,
    critic: nn.Module,
    config: ActorCriticConfig,
    total_updates: int | None = None,
    **loss_kwargs: Any,
) -> Learner:
    """A torchrl actor-critic loss with ``config``'s coefficients, in :func:`actor_critic_learner`.

    Args:
        loss_class: e.g. torchrl's ``A2CLoss`` or ``ClipPPOLoss``.
        actor: the stochastic actor.
        critic: the state-value network.
        config: loss (entropy and critic coefficients, critic loss type), optimizer
            and GAE hyperparameters.
        total_updates: learner updates of the whole run, for ``config.anneal_lr``.
        **loss_kwargs: the loss's own further arguments (PPO's ``clip_epsilon``, ...).

    Returns:
        The Learner.

    Example:
        >>> from torchrl.objectives import A2CLoss
        >>> learner = actor_critic_loss_learner(A2CLoss, **actor_critic_modules("CartPole-v1"),
        ...                        config=ActorCriticConfig(entropy_coef=0.0))
        >>> type(learner.loss_module).__name__, learner.loss_module.entropy_bonus
        ('A2CLoss', False)
    """
    loss = loss_class(
        actor, critic, entropy_bonus=config.entropy_coef > 0, entropy_coeff=config.entropy_coef,
        critic_coeff=config.critic_coef, loss_critic_type=config.loss_critic_type, **loss_kwargs,
    )  # fmt: skip
    return actor_critic_learner(loss, critic, config=config, total_updates=total_updates)
