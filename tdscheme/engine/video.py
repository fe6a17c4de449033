"""Videos of a policy: render an env's frames while the policy plays, write them as mp4.

An env renders when it is a torchrl env over gymnasium env(s) made with
``render_mode="rgb_array"``: :func:`tdscheme.envs.make_env` and
:func:`tdscheme.envs.make_atari_env` (``backend="gymnasium"``) take ``render_mode``, and
a preset's ``video_env_factory()`` builds its eval env that way (EnvPool does not
render). A batched env records its first copy.

Frames per second: the env's ``metadata["render_fps"]`` (CartPole 50, Pendulum 30,
MuJoCo one frame per env step), 30 when it has none; under gymnasium's
``AtariPreprocessing`` one frame of each ``frame_skip`` of the ALE's 60 per second
is rendered, so 60 / ``frame_skip`` (15 for the presets' Atari envs): real time.

The mp4 is H.264 in yuv420p (it plays in browsers and in W&B) through imageio's
ffmpeg plugin and imageio-ffmpeg's bundled ffmpeg (the ``video`` extra); a frame of
odd width or height is padded by one edge pixel, as yuv420p needs even sizes.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from tdscheme.envs import make_env
    >>> from tdscheme.presets.actor_critic import actor_critic_modules
    >>> actor = actor_critic_modules("CartPole-v1", hidden_sizes=(8,))["actor"]
    >>> env = make_env("CartPole-v1", render_mode="rgb_array")
    >>> recording = record_episode(env, actor, max_frames=20)
    >>> recording.frames.shape[1:], recording.fps
    ((400, 600, 3), 50.0)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = write_mp4(Path(tmp) / "episode.mp4", recording)
    ...     path.stat().st_size > 0
    True
    >>> env.close()
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type, step_mdp

from tdscheme.engine.evaluation import _act, _module_device
from tdscheme.engine.extras import missing_video_packages
from tdscheme.validation import install_command

__all__ = ["EpisodeRecorder", "Recording", "frames_per_second", "record_episode", "render_frame"]

logger = logging.getLogger(__name__)

#: The frame rate of the Atari 2600, which the ALE emulates.
_ALE_FPS = 60.0
_DEFAULT_FPS = 30.0


@dataclasses.dataclass(frozen=True)
class Recording:
    """The frames of one recorded episode.

    Attributes:
        frames: ``[T, H, W, 3]`` uint8: the frame after the reset, then one per step.
        fps: frames per second that play the episode in real time.
        episode_return: the sum of the recorded steps' rewards.
        complete: whether the episode ended before the frame cap.
        path: the mp4 it was written to (by :class:`EpisodeRecorder`), or ``None``.
    """

    frames: np.ndarray
    fps: float
    episode_return: float
    complete: bool
    path: Path | None = None


def render_frame(env: EnvBase) -> np.ndarray:
    """The current frame of ``env`` (its first copy when batched), ``[H, W, 3]`` uint8.

    Args:
        env: a torchrl env over gymnasium env(s) made with ``render_mode="rgb_array"``.

    Returns:
        The frame.

    Raises:
        RuntimeError: ``env`` does not render rgb frames (saying how to build one that does).
    """
    gym_env = _gymnasium_env(env)
    if gym_env.render_mode != "rgb_array":
        raise RuntimeError(
            f"the env does not render: its render_mode is {gym_env.render_mode!r}; accepted: "
            f"an env built with render_mode='rgb_array' (tdscheme.envs.make_env(..., "
            f"render_mode='rgb_array'); a Trainer takes its factory as video_env_factory)"
        )
    _headless_rendering()
    frame = gym_env.render()
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[-1] != 3:
        raise RuntimeError(
            f"the env's render() gave {type(frame).__name__} "
            f"{getattr(frame, 'shape', '')}; accepted: an [H, W, 3] array"
        )
    return frame.astype(np.uint8, copy=False)


def frames_per_second(env: EnvBase) -> float:
    """Frames per second that play ``env``'s rendered steps in real time (see the module).

    Args:
        env: a torchrl env over gymnasium env(s).

    Returns:
        The frame rate.
    """
    gym_env = _gymnasium_env(env)
    inner: Any = gym_env
    while isinstance(inner, gym.Wrapper):
        if isinstance(inner, gym.wrappers.AtariPreprocessing):
            return _ALE_FPS / inner.frame_skip
        inner = inner.env
    return float(gym_env.metadata.get("render_fps") or _DEFAULT_FPS)


def record_episode(
    env: EnvBase,
    policy: nn.Module,
    *,
    max_frames: int = 1000,
    deterministic: bool = True,
) -> Recording:
    """Resets ``env`` and records ``policy`` playing one episode of its first copy.

    The policy acts as in :func:`tdscheme.engine.evaluate` (the mode of its
    distribution when ``deterministic``, no gradients); nothing here draws from
    torch's, numpy's or Python's global random numbers.

    Args:
        env: a rendering torchrl env (see :func:`render_frame`); seed it first to
            choose the episode.
        policy: a TensorDict module writing ``"action"``.
        max_frames: the most frames recorded (the reset's included), an int ``>= 2``.
        deterministic: act with ``ExplorationType.DETERMINISTIC`` (else ``RANDOM``).

    Returns:
        The :class:`Recording`.

    Raises:
        ValueError: ``max_frames`` is not an int ``>= 2``.
        RuntimeError: ``env`` does not render.
    """
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 2:
        raise ValueError(f"max_frames={max_frames!r} is invalid; accepted: an int >= 2")
    device = _module_device(policy)
    mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
    episode_return, complete = 0.0, False
    with torch.no_grad(), set_exploration_type(mode):
        td = env.reset()
        frames = [render_frame(env)]
        while len(frames) < max_frames:
            td = env.step(_act(policy, td, device, env.device))
            frames.append(render_frame(env))
            episode_return += float(td.get(("next", "reward")).reshape(-1)[0])
            if bool(td.get(("next", "done")).reshape(-1)[0]):
                complete = True
                break
            # other copies of a batched env that ended are reset; the first one has not
            td = env.maybe_reset(step_mdp(td))
    return Recording(
        frames=np.stack(frames), fps=frames_per_second(env),
        episode_return=episode_return, complete=complete,
    )  # fmt: skip


def write_mp4(path: str | os.PathLike, recording: Recording) -> Path:
    """Writes ``recording`` as an H.264 mp4 at ``path`` (atomically: a partial file never shows).

    Args:
        path: the file to write (its folder is created).
        recording: the frames and frame rate.

    Returns:
        The path.

    Raises:
        ImportError: imageio or imageio-ffmpeg is not installed (naming the extra).
    """
    check_video_packages()
    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")
    frames = _even_sized(recording.frames)
    try:
        with imageio.get_writer(
            partial, format="FFMPEG", fps=recording.fps, codec="libx264",
            pixelformat="yuv420p", macro_block_size=2, ffmpeg_log_level="error",
        ) as writer:  # fmt: skip
            for frame in frames:
                writer.append_data(frame)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def check_video_packages() -> None:
    """Raises an ``ImportError`` naming the ``video`` extra when imageio or its ffmpeg is missing."""
    missing = missing_video_packages()
    if missing is not None:
        raise missing


class EpisodeRecorder:
    """Records episodes of a policy on its own rendering env, as mp4 files in a folder.

    The env is built, reset and rendered once here, so an env that cannot render
    fails at once, not at the first recording.

    Args:
        env_factory: builds a rendering torchrl env (see :func:`render_frame`).
        directory: where the mp4 files go (created when the first is written).
        max_frames: the most frames one video records.

    Raises:
        ImportError: the ``video`` extra's packages (or the env's renderer) are missing.
        RuntimeError: the env does not render (MuJoCo without a display: set
            ``MUJOCO_GL=egl`` or ``osmesa``; ``egl`` is the default here without one).

    Example:
        >>> import functools, tempfile
        >>> from tdscheme.envs import make_env
        >>> from tdscheme.presets.actor_critic import actor_critic_modules
        >>> actor = actor_critic_modules("CartPole-v1", hidden_sizes=(8,))["actor"]
        >>> factory = functools.partial(make_env, "CartPole-v1", render_mode="rgb_array")
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     with EpisodeRecorder(factory, tmp, max_frames=20) as recorder:
        ...         recording = recorder.record(actor, name="eval_0", seed=0)
        ...     recording.path.name, len(recording.frames) <= 20
        ('eval_0.mp4', True)
    """

    def __init__(
        self,
        env_factory: Callable[[], EnvBase],
        directory: str | os.PathLike,
        *,
        max_frames: int = 1000,
    ) -> None:
        check_video_packages()
        self.directory = Path(directory)
        self.max_frames = max_frames
        self._closed = False
        self.env = env_factory()
        try:
            self.env.reset()
            render_frame(self.env)
        except gym.error.DependencyNotInstalled as err:  # e.g. pygame, for classic control
            self.close()
            raise ImportError(f"{err} (or {install_command('video')})") from err
        except BaseException:
            self.close()
            raise

    def record(
        self,
        policy: nn.Module,
        *,
        name: str,
        seed: int | None = None,
        deterministic: bool = True,
    ) -> Recording:
        """Records one episode as ``directory/<name>.mp4``.

        Args:
            policy: a TensorDict module writing ``"action"``.
            name: the file's name, without ``.mp4``.
            seed: seeds the env first (``None``: the env goes on from where it is).
            deterministic: act with the mode of the policy's distribution.

        Returns:
            The :class:`Recording`, its ``path`` the mp4's.

        Raises:
            RuntimeError: the recorder is closed.
        """
        if self._closed:
            raise RuntimeError("EpisodeRecorder is closed")
        if seed is not None:
            self.env.set_seed(seed)
        recording = record_episode(
            self.env, policy, max_frames=self.max_frames, deterministic=deterministic
        )
        path = write_mp4(self.directory / f"{name}.mp4", recording)
        logger.info("video %s: %d frames, return %.1f", path, len(recording.frames),
                    recording.episode_return)  # fmt: skip
        return dataclasses.replace(recording, path=path)

    def close(self) -> None:
        """Closes the env; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        self.env.close()

    def __enter__(self) -> EpisodeRecorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _gymnasium_env(env: EnvBase) -> gym.Env:
    """The gymnasium env inside a torchrl env (the first one of a vector env)."""
    base: Any = env
    while isinstance(getattr(base, "base_env", None), EnvBase):  # TransformedEnv, nested
        base = base.base_env
    inner = getattr(base, "_env", None)  # torchrl's GymEnv and GymWrapper hold it here
    if isinstance(inner, gym.vector.VectorEnv) and hasattr(inner, "envs"):
        inner = inner.envs[0]
    if not isinstance(inner, gym.Env):
        raise RuntimeError(
            f"the env does not render: {type(base).__name__} wraps no gymnasium env (EnvPool "
            f"does not render); accepted: a gymnasium-backed env built with "
            f"render_mode='rgb_array'"
        )
    return inner


def _even_sized(frames: np.ndarray) -> np.ndarray:
    _, height, width, _ = frames.shape
    pad = ((0, 0), (0, height % 2), (0, width % 2), (0, 0))
    return np.pad(frames, pad, mode="edge") if any(p[1] for p in pad) else frames


def _headless_rendering() -> None:
    """Off-screen rendering choices, unless the user made them (read at the first render)."""
    # gymnasium's classic-control envs render with pygame: no greeting on import, and SDL's
    # dummy video driver (its default one prints an error where there is no display)
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    if not os.environ.get("DISPLAY"):
        # gymnasium's MuJoCo renderer tries GLFW first, which needs a display and fails late
        os.environ.setdefault("MUJOCO_GL", "egl")
