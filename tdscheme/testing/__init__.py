"""Deterministic policies and (faulty) env factories, importable by Ray workers.

The faulty envs are :mod:`tdscheme.envs.faulty`'s (``make_env`` is its
:func:`~tdscheme.envs.faulty.make_faulty_env`), re-exported for the tests.

Tests use these so that the objects they send to Ray workers pickle by
reference. Everything here is real: real gymnasium envs
wrapped by torchrl, real ``TensorDictModule`` policies.

Example:
    >>> env = make_env("Pendulum-v1")
    >>> policy = bias_policy(3, 1, bias=0.5)
    >>> rollout = env.rollout(3, policy)
    >>> rollout["action"].flatten().tolist()
    [0.5, 0.5, 0.5]
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

# the faulty envs are a public feature (fault drills); the kit keeps its old name for them
from tdscheme.envs.faulty import FaultyEnv, PixelsLikeObs
from tdscheme.envs.faulty import make_faulty_env as make_env
from tdscheme.testing.probe_envs import (
    EchoConfigEnv,
    EchoLevel,
    apply_echo_config,
    apply_echo_level_at_least_0,
    echo_config_env,
    make_gated_env,
)
from tdscheme.testing.ray_checks import (
    alive_actor_ids,
    assert_no_actors_left,
    kill_and_wait,
    prestart_workers,
)

__all__ = [
    "CountingPolicy",
    "EchoConfigEnv",
    "EchoLevel",
    "FaultyEnv",
    "OneHotArgmax",
    "PixelsLikeObs",
    "alive_actor_ids",
    "apply_echo_config",
    "apply_echo_level_at_least_0",
    "assert_no_actors_left",
    "assert_same",
    "bias_policy",
    "cartpole_learner",
    "cartpole_modules",
    "echo_config_env",
    "kill_and_wait",
    "make_env",
    "make_gated_env",
    "mlp_policy",
    "prestart_workers",
    "seed_collector",
]


def bias_policy(
    obs_dim: int, action_dim: int, *, bias: float = 0.0, obs_key: str = "observation"
) -> TensorDictModule:
    """A linear policy with zero weights: its action equals its bias.

    Pushing weights with another bias changes every later action to that bias,
    which is how tests see which weights a worker runs.

    Args:
        obs_dim: observation size.
        action_dim: action size.
        bias: the constant action.
        obs_key: the observation key.

    Returns:
        A ``TensorDictModule`` writing ``"action"``.
    """
    linear = nn.Linear(obs_dim, action_dim)
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.fill_(bias)
    return TensorDictModule(linear, in_keys=[obs_key], out_keys=["action"])


def seed_collector(collector: Any, seed: int) -> int:
    """``collector.set_seed(seed)``, then a reset: torchrl's collector resets its envs unseeded
    when built and ``set_seed`` leaves that observation as each env row's first frame (the
    next step did not follow from it); tdscheme's workers reset after seeding, and so do tests.

    Returns: the seed torchrl chains to next.
    """
    next_seed = collector.set_seed(seed)
    collector.reset()
    return next_seed


class OneHotArgmax(nn.Module):
    """Turns logits into the one-hot action torchrl's discrete gym envs expect."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.int64)


def mlp_policy(
    obs_dim: int, action_dim: int, *, discrete: bool = True, obs_key: str = "observation"
) -> TensorDictModule:
    """A deterministic MLP policy: two hidden tanh layers of 64 units.

    Args:
        obs_dim: flat observation size.
        action_dim: number of actions (discrete, one-hot output) or action size.
        discrete: one-hot argmax actions (CartPole) or tanh-bounded continuous ones.
        obs_key: the observation key.

    Returns:
        A ``TensorDictModule`` writing ``"action"``.
    """
    net = nn.Sequential(
        nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, action_dim),
        OneHotArgmax() if discrete else nn.Tanh(),
    )  # fmt: skip
    return TensorDictModule(net, in_keys=[obs_key], out_keys=["action"])


def cartpole_modules(*, num_cells: int = 32) -> dict[str, nn.Module]:
    """A CartPole actor (logits -> one-hot categorical action) and critic: a ``policy_factory``.

    Module-level (and configurable with ``functools.partial``) so that Ray
    gradient workers import it by reference.

    Args:
        num_cells: hidden units of the actor's and the critic's one hidden layer.

    Returns:
        ``{"actor": ProbabilisticActor, "critic": ValueOperator}``.

    Example:
        >>> sorted(cartpole_modules(num_cells=8))
        ['actor', 'critic']
    """
    from torchrl.data import OneHot
    from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator

    actor = ProbabilisticActor(
        TensorDictModule(
            MLP(in_features=4, out_features=2, num_cells=[num_cells]),
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        out_keys=["action"],
        distribution_class=OneHotCategorical,
        spec=OneHot(2),
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(in_features=4, out_features=1, num_cells=[num_cells]), in_keys=["observation"]
    )
    return {"actor": actor, "critic": critic}


def cartpole_learner(
    *,
    actor: nn.Module,
    critic: nn.Module,
    loss: str = "a2c",
    lr: float = 3e-3,
    max_grad_norm: float | None = 1.0,
    entropy_coef: float = 0.01,
    gamma: float = 0.99,
    lmbda: float = 0.95,
    optimizer: Any = None,
) -> Any:
    """A Learner for :func:`cartpole_modules`: A2C or clipped PPO with GAE, Adam.

    A ``learner_factory``: ``cartpole_learner(**cartpole_modules())``. PPO
    advantages are not normalized, so a gradient over a concatenated batch is the
    frame-weighted average of the gradients over its parts.

    Args:
        actor: the actor of :func:`cartpole_modules`.
        critic: the critic of :func:`cartpole_modules`.
        loss: ``"a2c"`` (torchrl ``A2CLoss``) or ``"ppo"`` (``ClipPPOLoss``).
        lr: Adam learning rate.
        max_grad_norm: gradient clipping (``None``: none).
        entropy_coef: entropy bonus coefficient.
        gamma: discount.
        lmbda: GAE lambda.
        optimizer: a factory ``params -> torch.optim.Optimizer`` (e.g.
            ``functools.partial(torch.optim.SGD, lr=1.0)``); ``None``: Adam(``lr``).

    Returns:
        A :class:`tdscheme.learner.Learner`.

    Raises:
        ValueError: ``loss`` is not ``"a2c"`` or ``"ppo"``.

    Example:
        >>> cartpole_learner(**cartpole_modules(num_cells=8), loss="ppo").version
        0
    """
    from torchrl.objectives import A2CLoss, ClipPPOLoss
    from torchrl.objectives.value import GAE

    from tdscheme.learner import Learner, LearnerConfig

    if loss == "a2c":
        loss_module = A2CLoss(actor, critic, entropy_coeff=entropy_coef)
    elif loss == "ppo":
        loss_module = ClipPPOLoss(
            actor, critic, entropy_coeff=entropy_coef, normalize_advantage=False
        )
    else:
        raise ValueError(f"loss={loss!r} is not one of ['a2c', 'ppo']")
    return Learner(
        loss_module,
        config=LearnerConfig(lr=lr, max_grad_norm=max_grad_norm),
        optimizer=optimizer,
        value_estimator=GAE(gamma=gamma, lmbda=lmbda, value_network=critic),
    )


class CountingPolicy(TensorDictModuleBase):
    """A policy whose action is its single weight (1 at start), as torchrl's own tests use.

    With torchrl's ``CountingEnv`` the collected actions show which weights a
    worker runs: add 1 to ``weight`` and push, and later actions are 2.
    """

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))
        self.in_keys = []
        self.out_keys = ["action"]

    def forward(self, td: Any) -> Any:
        return td.set("action", self.weight.detach().expand(*td.shape, 1).clone())


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Asserts that nested dicts, lists and tuples of tensors and plain values are equal.

    Example:
        >>> assert_same({"w": torch.ones(2), "step": [1, 2]}, {"w": torch.ones(2), "step": [1, 2]})
        >>> assert_same({"w": torch.ones(2)}, {"w": torch.zeros(2)})
        Traceback (most recent call last):
        ...
        AssertionError: state['w']
    """
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where
