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

import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

# the faulty envs are a public feature (fault drills); the kit keeps its old name for them
from tdscheme.envs.faulty import FaultyEnv, PixelsLikeObs
from tdscheme.envs.faulty import make_faulty_env as make_env

__all__ = [
    "CountingPolicy",
    "FaultyEnv",
    "OneHotArgmax",
    "PixelsLikeObs",
    "alive_actor_ids",
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
    obs_dim: int,
    action_dim: int,
    *,
    hidden: int = 64,
    depth: int = 2,
    discrete: bool = True,
    obs_key: str = "observation",
) -> TensorDictModule:
    """A deterministic MLP policy (``depth`` hidden layers of ``hidden`` units).

    Args:
        obs_dim: flat observation size.
        action_dim: number of actions (discrete, one-hot output) or action size.
        hidden: hidden units per layer.
        depth: number of hidden layers.
        discrete: one-hot argmax actions (CartPole) or tanh-bounded continuous ones.
        obs_key: the observation key.

    Returns:
        A ``TensorDictModule`` writing ``"action"``.
    """
    layers: list[nn.Module] = []
    size = obs_dim
    for _ in range(depth):
        layers += [nn.Linear(size, hidden), nn.Tanh()]
        size = hidden
    layers.append(nn.Linear(size, action_dim))
    layers.append(OneHotArgmax() if discrete else nn.Tanh())
    return TensorDictModule(nn.Sequential(*layers), in_keys=[obs_key], out_keys=["action"])


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


def alive_actor_ids() -> set[str]:
    """The ids of the Ray actors that are not dead (needs a connected Ray)."""
    # ray.util.state needs the dashboard, which a test Ray does not run; the GCS actor
    # table is the same information (test-only use of a private module).
    from ray._private.state import state

    return {aid for aid, info in state.actor_table(None).items() if info["State"] != "DEAD"}


def assert_no_actors_left(before: set[str], *, timeout_s: float = 10.0, what: str = "test") -> None:
    """Waits up to ``timeout_s`` (``ray.kill`` is asynchronous) for actors not in ``before`` to die.

    Raises:
        AssertionError: some actor created since ``before`` is still alive.
    """
    deadline = time.monotonic() + timeout_s
    while (left := alive_actor_ids() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"{what} left {len(left)} Ray actor(s) alive: {sorted(left)}"


def kill_and_wait(actor: Any, timeout_s: float = 30.0) -> None:
    """``ray.kill(actor)``, then waits until the actor is gone.

    ``ray.kill`` returns before the actor is dead: a call made at once may still be
    served. This pings the actor until Ray reports it dead.

    Raises:
        AssertionError: the actor still answers ``timeout_s`` after the kill.
    """
    import ray

    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_call__.remote(lambda _: None), timeout=5)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the actor still answers {timeout_s:g} s after ray.kill")


class _StepsOnceFileHolds(gym.Wrapper):
    """Holds its first step until a file holds a text (a condition another process makes true)."""

    def __init__(self, env: gym.Env, path: str, text: str, timeout_s: float) -> None:
        super().__init__(env)
        self._path, self._text, self._timeout_s = Path(path), text, timeout_s
        self._open = False

    def step(self, action: Any) -> Any:
        deadline = time.monotonic() + self._timeout_s
        while not self._open:
            self._open = self._path.is_file() and self._text in self._path.read_text()
            if not self._open and time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self._path} did not hold {self._text!r} in {self._timeout_s} s"
                )
            time.sleep(0.05)
        return self.env.step(action)


def make_gated_env(
    env_id: str = "CartPole-v1",
    *,
    path: str,
    text: str,
    timeout_s: float = 120.0,
    render_mode: str | None = None,
) -> Any:
    """A torchrl env whose first step waits until the file at ``path`` holds ``text``.

    A timing-free test of "X does not wait for Y": Y steps this env, gated on a file
    that only X, going on, writes; if X waited for Y, the gate never opens and the
    step raises after ``timeout_s``.

    Args:
        env_id: a gymnasium id.
        path: the file to read (e.g. a run's ``metrics.csv``).
        text: what it must hold (e.g. ``"\\n4096,"``: a row logged at step 4096).
        timeout_s: the longest the first step waits before it raises ``RuntimeError``.
        render_mode: gymnasium's ``render_mode`` (``"rgb_array"`` for a video env).
    """
    from torchrl.envs import GymWrapper

    env = gym.make(env_id, render_mode=render_mode)
    return GymWrapper(_StepsOnceFileHolds(env, path, text, timeout_s))


class EchoConfigEnv(gym.Env):
    """Observes its env config's ``level`` (a float): a frame shows the config it ran under.

    ``set_env_config({"level": x})`` (or a bare number) takes effect at once; episodes last
    ``episode_steps`` steps, reward 1 per step, two actions that change nothing.
    """

    observation_space = gym.spaces.Box(-1e9, 1e9, (1,), dtype="float32")
    action_space = gym.spaces.Discrete(2)

    def __init__(self, episode_steps: int = 7) -> None:
        self.level, self.episode_steps, self._t = 0.0, episode_steps, 0

    def set_env_config(self, config: Any) -> None:
        self.level = float(config["level"] if isinstance(config, dict) else config)

    def _obs(self) -> Any:
        return torch.tensor([self.level], dtype=torch.float32).numpy()

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self._t += 1
        return self._obs(), 1.0, False, self._t >= self.episode_steps, {}


def echo_config_env(
    num_envs: int = 1, *, episode_steps: int = 7, autoreset: str = "DISABLED", lengths: Any = None
) -> Any:
    """A torchrl ``GymWrapper`` over :class:`EchoConfigEnv` (a ``SyncVectorEnv`` of ``num_envs``).

    ``lengths``: one episode length per copy (copies then reset at different steps).
    """
    from torchrl.envs import GymWrapper

    if num_envs == 1:
        return GymWrapper(EchoConfigEnv(episode_steps))
    lengths = lengths or [episode_steps] * num_envs
    mode = getattr(gym.vector.AutoresetMode, autoreset)
    copies = [lambda n=n: EchoConfigEnv(n) for n in lengths]
    return GymWrapper(gym.vector.SyncVectorEnv(copies, autoreset_mode=mode))
