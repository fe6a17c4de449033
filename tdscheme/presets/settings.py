"""The presets' algorithm settings: plain dataclasses, checked without torch.

:class:`ActorCriticConfig` (PPO, A2C) and :class:`OffPolicyConfig` (DQN, SAC,
TD3, DDPG) hold a preset's env, network and loss hyperparameters; the fields both
have (the env, the network's shape, the discount, the optimizer, the device) and
their checks are :class:`AlgoConfig`'s, once. Each value is checked when the
config is made, with :mod:`tdscheme.validation`'s wording. Nothing here imports torch, so that the
``tdscheme`` command checks every setting before it starts Ray (the networks
they describe are built in :mod:`~tdscheme.presets.actor_critic` and
:mod:`~tdscheme.presets.offpolicy_modules`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tdscheme.envs.ids import ENV_BACKENDS, check_env_id, is_atari_id
from tdscheme.learner.config import TARGET_UPDATES
from tdscheme.validation import check_bool, check_choice, check_int, invalid

__all__ = [
    "ACTIVATION_NAMES",
    "ADVANTAGES",
    "PIXEL_NETWORKS",
    "OFFPOLICY_ALGOS",
    "ActorCriticConfig",
    "AlgoConfig",
    "OffPolicyConfig",
]

#: The hidden-layer activations a preset's networks accept, by name.
ACTIVATION_NAMES = ("elu", "relu", "tanh")

#: The advantage estimators of the actor-critic presets (``ActorCriticConfig.advantage``).
ADVANTAGES = ("gae", "vtrace")

#: The CNNs of the pixel presets (``ActorCriticConfig.pixel_network``).
PIXEL_NETWORKS = ("shallow", "nature")

#: The off-policy algorithms the presets build (torchrl's losses of the same names).
OFFPOLICY_ALGOS = ("dqn", "sac", "td3", "ddpg")


def _check_number(
    name: str,
    value: Any,
    low: float,
    high: float | None = None,
    *,
    low_open: bool = False,
    optional: bool = False,
) -> None:
    """Raises unless ``value`` is a number from ``low`` (excluded when ``low_open``) up to
    ``high`` (included; no bound when ``None``), or ``None`` when ``optional``.

    Example:
        >>> _check_number("tau", 0, 0, 1, low_open=True)
        Traceback (most recent call last):
        ...
        ValueError: tau=0 is invalid; accepted: a number in (0, 1]
        >>> _check_number("max_grad_norm", None, 0, low_open=True, optional=True)
    """
    if optional and value is None:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    above = number and (value > low if low_open else value >= low)
    if not (above and (high is None or value <= high)):
        if high is None:
            accepted = f"a number {'>' if low_open else '>='} {low:g}"
        else:
            accepted = f"a number in {'(' if low_open else '['}{low:g}, {high:g}]"
        raise invalid(name, value, f"{'None or ' if optional else ''}{accepted}")


@dataclasses.dataclass
class AlgoConfig:
    """The settings every algorithm config has: env, network shape, discount, optimizer, device.

    The base of :class:`ActorCriticConfig` and :class:`OffPolicyConfig`, which
    override the defaults that differ (``num_envs``, ``activation``,
    ``max_grad_norm``) and document the fields whose meaning is their own.

    Args:
        env_id: a gymnasium env id with a flat observation (with
            ``env_backend="envpool"``: an EnvPool id).
        env_backend: ``"gymnasium"`` (default) or ``"envpool"``
            (:func:`tdscheme.envs.make_env`'s ``backend``).
        env_config: attributes set on every gymnasium env copy once built, in training
            and evaluation (``{"max_torque": 1.0}``: Pendulum with a weaker motor), through
            :class:`~tdscheme.envs.EnvAttributes`; a curriculum's configs replace it in
            training; ``None``: the env as registered.
        num_envs: envs each collector worker steps in one batch (gymnasium's sync
            vector env); more envs per process means more frames per second.
        eval_num_envs: envs stepped together during evaluation.
        hidden_sizes: hidden layers of each network.
        activation: ``"tanh"``, ``"relu"`` or ``"elu"``.
        gamma: discount.
        lr: Adam learning rate.
        max_grad_norm: gradient clipping (``None``: none).
        reward_scale: multiply training rewards by this (episode returns are logged
            unscaled).
        device: where the learner trains (``"cpu"``, ``"cuda"``).
        max_nonfinite_updates: updates skipped for NaN / inf in a row that stop the
            run (the learner's ``LearnerConfig.max_nonfinite_updates``).
        drop_nonfinite_frames: leave the frames holding NaN / inf out (counted)
            instead of skipping the update (off-policy: out of the replay buffer).

    Raises:
        ValueError: a value out of range, naming the field, its value and what is accepted.

    Example:
        >>> AlgoConfig(gamma=2)
        Traceback (most recent call last):
        ...
        ValueError: gamma=2 is invalid; accepted: a number in [0, 1]
    """

    env_id: str = "CartPole-v1"
    env_backend: str = "gymnasium"
    env_config: dict[str, Any] | None = None
    num_envs: int = 8
    eval_num_envs: int = 10
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "relu"
    gamma: float = 0.99
    lr: float = 3e-4
    max_grad_norm: float | None = None
    reward_scale: float = 1.0
    device: str = "cpu"
    max_nonfinite_updates: int = 3
    drop_nonfinite_frames: bool = False

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(self.hidden_sizes)
        check_int("max_nonfinite_updates", self.max_nonfinite_updates, minimum=1)
        check_bool("drop_nonfinite_frames", self.drop_nonfinite_frames)
        check_choice("env_backend", self.env_backend, ENV_BACKENDS)
        self._check_env_config()
        if self.env_backend == "gymnasium":  # EnvPool has its own ids, checked by EnvPool
            check_env_id(self.env_id)
        for name in ("num_envs", "eval_num_envs"):
            check_int(name, getattr(self, name), minimum=1)
        if not self.hidden_sizes or any(
            isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.hidden_sizes
        ):
            raise invalid("hidden_sizes", self.hidden_sizes, "ints >= 1, e.g. (64, 64)")
        check_choice("activation", self.activation, sorted(ACTIVATION_NAMES))
        _check_number("gamma", self.gamma, 0, 1)
        _check_number("lr", self.lr, 0, low_open=True)
        _check_number("max_grad_norm", self.max_grad_norm, 0, low_open=True, optional=True)
        _check_number("reward_scale", self.reward_scale, 0, low_open=True)

    def _check_env_config(self) -> None:
        if self.env_config is None:
            return
        if not isinstance(self.env_config, dict) or not all(
            isinstance(name, str) for name in self.env_config
        ):
            raise invalid(
                "env_config", self.env_config,
                'None or a dict of env attribute names to values, e.g. {"max_torque": 1.0}',
            )  # fmt: skip
        if self.env_backend != "gymnasium" or is_atari_id(self.env_id):
            raise invalid(
                "env_config", self.env_config, "None with this env (attributes are set on "
                "gymnasium's classic and MuJoCo envs, not EnvPool's or Atari's)",
                context=f"env_id={self.env_id!r}, env_backend={self.env_backend!r}",
            )  # fmt: skip


@dataclasses.dataclass
class ActorCriticConfig(AlgoConfig):
    """Env, network and loss hyperparameters of an actor-critic preset (PPO, A2C, IMPALA, APPO).

    Besides :class:`AlgoConfig`'s settings (with ``num_envs=16``,
    ``activation="tanh"`` and ``max_grad_norm=0.5`` by default):

    Args:
        env_id: a gymnasium env id with a flat observation and a discrete or box action
            (with ``env_backend="envpool"``: an EnvPool id).
        hidden_sizes: hidden layers of the actor and of the (separate) critic.
        gae_lambda: GAE's lambda.
        anneal_lr: decay the learning rate linearly to ``lr * lr_end_factor`` over
            ``anneal_frames`` frames, then keep it there.
        anneal_frames: frames over which the learning rate decays; ``None``: the
            run's ``total_frames``.
        lr_end_factor: the final learning rate as a fraction of ``lr``.
        num_epochs: passes over each batch.
        minibatch_size: frames per optimizer step (``None``: the whole batch).
        clip_epsilon: PPO's ratio clip (ignored by A2C).
        entropy_coef: weight of the entropy bonus.
        critic_coef: weight of the value loss.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        normalize_advantage: standardize advantages per minibatch (PPO).
        advantage: the advantage estimator: ``"gae"`` (on-policy, GAE with
            ``gae_lambda``) or ``"vtrace"`` (IMPALA / APPO: V-trace over the behaviour
            log-probs the workers record, for batches collected by older weights).
        vtrace_rho_clip: V-trace's importance-weight clip of the value target (rho-bar).
        vtrace_c_clip: V-trace's trace-cutting clip (c-bar).
        pixel_network: the CNN of a pixel env (an Atari id): ``"shallow"`` (the IMPALA
            paper's) or ``"nature"`` (Mnih et al.'s, torchrl's IMPALA example's).
        adam_eps: Adam's epsilon (torch's default 1e-8; CleanRL's and SB3's PPO use 1e-5).

    Raises:
        ValueError: a value out of range, naming the field, its value and what is accepted.

    Example:
        >>> ActorCriticConfig(lr=1e-3).hidden_sizes
        (64, 64)
    """

    num_envs: int = 16
    activation: str = "tanh"
    max_grad_norm: float | None = 0.5
    gae_lambda: float = 0.95
    anneal_lr: bool = True
    anneal_frames: int | None = None
    lr_end_factor: float = 0.0
    num_epochs: int = 4
    minibatch_size: int | None = 256
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.01
    critic_coef: float = 0.5
    loss_critic_type: str = "l2"
    normalize_advantage: bool = True
    advantage: str = dataclasses.field(default="gae", metadata={"choices": ADVANTAGES})
    vtrace_rho_clip: float = 1.0
    vtrace_c_clip: float = 1.0
    pixel_network: str = dataclasses.field(default="shallow", metadata={"choices": PIXEL_NETWORKS})
    adam_eps: float = 1e-8

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_epochs", self.num_epochs, minimum=1)
        check_int("anneal_frames", self.anneal_frames, minimum=1, optional=True)
        check_int("minibatch_size", self.minibatch_size, minimum=1, optional=True)
        check_bool("anneal_lr", self.anneal_lr)
        check_bool("normalize_advantage", self.normalize_advantage)
        _check_number("gae_lambda", self.gae_lambda, 0, 1)
        _check_number("lr_end_factor", self.lr_end_factor, 0, 1)
        _check_number("clip_epsilon", self.clip_epsilon, 0, low_open=True)
        _check_number("entropy_coef", self.entropy_coef, 0)
        _check_number("critic_coef", self.critic_coef, 0)
        check_choice("loss_critic_type", self.loss_critic_type, ("l2", "l1", "smooth_l1"))
        check_choice("advantage", self.advantage, ADVANTAGES)
        check_choice("pixel_network", self.pixel_network, PIXEL_NETWORKS)
        _check_number("adam_eps", self.adam_eps, 0, low_open=True)
        for name in ("vtrace_rho_clip", "vtrace_c_clip"):
            _check_number(name, getattr(self, name), 0, low_open=True)


@dataclasses.dataclass
class OffPolicyConfig(AlgoConfig):
    """Env, network, loss, replay and exploration hyperparameters of an off-policy preset.

    Besides :class:`AlgoConfig`'s settings (with its defaults: ``num_envs=8``,
    ``activation="relu"``, ``max_grad_norm=None``):

    Args:
        env_id: a gymnasium env id with a flat observation (discrete actions for
            DQN, a 1-D box for SAC, TD3 and DDPG).
        env_backend: ``"gymnasium"`` (default) or ``"envpool"`` (the same id in EnvPool's
            threads; see :func:`tdscheme.envs.make_env`).
        num_envs: envs each collector worker steps in one batch.
        hidden_sizes: hidden layers of the actor and of each Q-network.
        lr: Adam learning rate (one optimizer over every trained parameter).
        batch_size: frames per gradient step (the replay buffer's sample size).
        buffer_size: frames the replay buffer holds (the oldest are overwritten).
        prioritized: prioritized replay (torchrl's ``PrioritizedSampler``, or tdscheme's
            sum tree where torchrl's extension does not load; the loss's ``td_error``
            written back after every step), driver-held or Ray-held.
        priority_alpha: prioritized replay's exponent on priorities.
        priority_beta: prioritized replay's importance-sampling exponent.
        replay_shards: Ape-X's replay (DQN): ``K > 0`` prioritized shards of
            ``buffer_size / K`` frames each, written by the workers with the TD errors
            they compute (:class:`~tdscheme.replay.sharded.ShardedReplayBuffer`; needs
            ``buffer_location="ray"`` or ``"auto"``); 0: one buffer.
        n_steps: n-step returns (Ape-X's 3), computed by each collector worker on the
            frames it writes into a Ray-held buffer (:mod:`~tdscheme.replay.n_step`; needs
            ``buffer_location="ray"`` or ``"auto"``); 1: one-step frames.
        dueling: DQN: a dueling Q-network (torchrl's ``DuelingMlpDQNet``).
        worker_eps: DQN: Ape-X's fixed epsilon per worker, ``worker_eps ** (1 + 7 i /
            (N - 1))`` for worker ``i`` of ``N`` (:mod:`tdscheme.rollout.exploration`),
            instead of the annealed ``eps_init`` -> ``eps_end``; ``None``: annealed.
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

    batch_size: int = 256
    buffer_size: int = 100_000
    prioritized: bool = False
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    replay_shards: int = 0
    n_steps: int = 1
    dueling: bool = False
    worker_eps: float | None = None
    target_update: str = dataclasses.field(default="soft", metadata={"choices": TARGET_UPDATES})
    tau: float = 0.005
    hard_update_interval: int = 500
    eps_init: float = 1.0
    eps_end: float = 0.05
    exploration_frames: int = 10_000
    noise_sigma: float = 0.1
    noise_sigma_end: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("batch_size", "buffer_size", "hard_update_interval", "exploration_frames"):
            check_int(name, getattr(self, name), minimum=1)
        check_choice("target_update", self.target_update, TARGET_UPDATES)
        check_bool("prioritized", self.prioritized)
        check_bool("dueling", self.dueling)
        check_int("replay_shards", self.replay_shards, minimum=0)
        check_int("n_steps", self.n_steps, minimum=1)
        if self.worker_eps is not None:
            _check_number("worker_eps", self.worker_eps, 0, 1)
        _check_number("tau", self.tau, 0, 1, low_open=True)
        for name in ("eps_init", "eps_end", "priority_alpha", "priority_beta"):
            _check_number(name, getattr(self, name), 0, 1)
        for name in ("noise_sigma", "noise_sigma_end"):
            _check_number(name, getattr(self, name), 0)
