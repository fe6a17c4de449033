"""Envs that make a property observable: a step gated on a file, an observation echoing the env config.

Importable by Ray workers (tests send these factories to actors by reference).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch


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


@dataclasses.dataclass(frozen=True)
class EchoLevel:
    """An env config that is a dataclass: :class:`EchoConfigEnv` observes its ``level``."""

    level: float
    note: str = ""


def apply_echo_config(env: Any, config: Any) -> None:
    """An ``apply_env_config``: ``set_env_config`` on each copy of :func:`echo_config_env`'s env."""
    inner = env._env  # torchrl's GymWrapper: one EchoConfigEnv or a SyncVectorEnv of them
    for copy in getattr(inner, "envs", [inner]):
        copy.set_env_config(config)


def apply_echo_level_at_least_0(env: Any, config: Any) -> None:
    """:func:`apply_echo_config` that raises on a negative ``level``: a config the env
    refuses only when it is applied (nothing can check it before)."""
    if config["level"] < 0:
        raise ValueError(f"level {config['level']} is below 0")
    apply_echo_config(env, config)


class EchoConfigEnv(gym.Env):
    """Observes its env config's ``level`` (a float): a frame shows the config it ran under.

    ``set_env_config({"level": x})`` (or an :class:`EchoLevel`, or a bare number) takes effect
    at once; episodes last ``episode_steps`` steps, reward 1 per step, two actions that change
    nothing.
    """

    observation_space = gym.spaces.Box(-1e9, 1e9, (1,), dtype="float32")
    action_space = gym.spaces.Discrete(2)

    def __init__(self, episode_steps: int = 7) -> None:
        self.level, self.episode_steps, self._t = 0.0, episode_steps, 0

    def set_env_config(self, config: Any) -> None:
        if isinstance(config, EchoLevel):
            config = config.level
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
