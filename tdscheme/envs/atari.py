"""Atari from pixels: 4 stacked 84x84 grey uint8 frames, from EnvPool or ale-py (gymnasium).

:func:`make_atari_env` builds the env an IMPALA / APPO learner trains on, with
the usual Atari preprocessing, the same on both backends:

* 4 emulator frames per step (the action repeated), the last two max-pooled;
* grey frames resized to 84x84 (OpenCV's ``INTER_AREA``), 4 stacked:
  ``"observation"`` is ``[4, 84, 84]`` uint8 (a reset fills the stack with its
  frame). It stays uint8: the network divides by 255, and batches travel at a
  quarter of float32's size;
* 1 to ``noop_max`` no-op actions at each reset (uniform), as both EnvPool and
  gymnasium count them (EnvPool 1.2.5 crashes with ``noop_max=0``, so 1 is the
  least; ``noop_max=1``, one no-op, makes resets deterministic, and then both
  backends give the same frames for the same actions, bit for bit);
* no episodic life (an episode is a whole game, EnvPool's default and
  Machado et al.'s advice) and no FIRE at reset (gymnasium has no such wrapper,
  so EnvPool's ``use_fire_reset`` is off: the policy learns to fire, as it must
  after each lost life anyway);
* episodes truncated at 108,000 emulator frames (27,000 steps); the minimal
  action set, as discrete indices (torchrl's ``Categorical``, the action spec of
  both backends: a policy outputs ``action`` as an int64 index, not one-hot);
* no sticky actions by default (``repeat_action_probability=0``, EnvPool's
  default; ALE's own v5 default is 0.25);
* torchrl's ``RewardSum`` and ``StepCounter``: ``("next", "episode_reward")``
  is the game's score (the raw rewards' sum, also when clipped) and
  ``("next", "step_count")`` the episode's steps, as in the presets' envs;
  ``clip_rewards=True`` (the default, for training) then clips ``"reward"``
  to ``[-1, 1]`` with ``RewardClipping``; evaluation passes ``False``.

Backends: ``"envpool"`` (default) does it all in EnvPool's C++ threads (the
``envpool`` extra; batch size ``[num_envs]``, also for one env, as
:func:`~tdscheme.envs.make_env`); ``"gymnasium"``, where EnvPool is missing,
is ale-py under gymnasium's ``AtariPreprocessing`` and ``FrameStackObservation``
(the ``atari`` extra), one env (batch size ``[]``) or a ``SyncVectorEnv`` with
``AutoresetMode.DISABLED`` (batch size ``[num_envs]``). Rewards and done flags
are ``[*batch_size, 1]`` on both. The :class:`~tdscheme.rollout.lean.LeanCollector`
steps both on its lean path.

Example:
    >>> env = make_atari_env("ALE/Pong-v5", num_envs=2, backend="gymnasium")
    >>> td = env.rollout(3)
    >>> td["next", "observation"].shape, td["next", "observation"].dtype
    (torch.Size([2, 3, 4, 84, 84]), torch.uint8)
    >>> td["action"].dtype, td["next", "reward"].shape, td["next", "episode_reward"].shape
    (torch.int64, torch.Size([2, 3, 1]), torch.Size([2, 3, 1]))
    >>> env.close()
"""

from __future__ import annotations

import difflib
import functools
from typing import Any

import gymnasium as gym
from torchrl.envs import (
    Compose,
    EnvBase,
    GymWrapper,
    RewardClipping,
    RewardSum,
    StepCounter,
    TransformedEnv,
)

from tdscheme.envs.ids import _ATARI_ID, check_env_id, is_atari_id
from tdscheme.envs.make import make_envpool_env
from tdscheme.validation import check_bool, check_choice, check_int, install_command, invalid

__all__ = ["ATARI_BACKENDS", "is_atari_id", "make_atari_env"]

#: The backends :func:`make_atari_env` accepts.
ATARI_BACKENDS = ("envpool", "gymnasium")

_FRAME_SKIP = 4
_FRAME_STACK = 4
_SCREEN_SIZE = 84
_MAX_EPISODE_FRAMES = 108_000  # 30 minutes at 60 frames/s, the ALE v5 and EnvPool default


def make_atari_env(
    env_id: str,
    *,
    num_envs: int = 1,
    backend: str = "envpool",
    clip_rewards: bool = True,
    noop_max: int = 30,
    repeat_action_probability: float = 0.0,
    render_mode: str | None = None,
) -> TransformedEnv:
    """An Atari game as a torchrl env of 4x84x84 uint8 frame stacks (see the module).

    Args:
        env_id: ``"ALE/<Game>-v5"`` or ``"<Game>-v5"``, e.g. ``"ALE/Pong-v5"`` (either
            backend takes either form).
        num_envs: copies stepped together, an int ``>= 1``.
        backend: ``"envpool"`` (default) or ``"gymnasium"`` (ale-py).
        clip_rewards: clip ``"reward"`` to ``[-1, 1]`` (training); ``False`` keeps the
            game's rewards (evaluation). ``("next", "episode_reward")`` is the
            game's score either way.
        noop_max: the most no-op actions at a reset, an int ``>= 1``.
        repeat_action_probability: ALE's sticky actions, a number in ``[0, 1]``.
        render_mode: ale-py's ``render_mode`` (``"rgb_array"``: the full-colour 210x160
            screen, for videos); ``backend="gymnasium"`` only (EnvPool does not render).

    Returns:
        A ``TransformedEnv`` (``RewardSum``, ``StepCounter``, and ``RewardClipping``
        when ``clip_rewards``) over torchrl's EnvPool or gymnasium wrapper.

    Raises:
        ValueError: an argument is invalid (an unknown game names the closest ones).
        ImportError: the backend's packages are missing (``envpool``: EnvPool;
            ``gymnasium``: ale-py and OpenCV, the ``atari`` extra).

    Example:
        >>> env = make_atari_env("Pong-v5", backend="gymnasium", clip_rewards=False)
        >>> env.batch_size, env.action_spec.space.n
        (torch.Size([]), 6)
        >>> env.close()
    """
    match = _ATARI_ID.match(env_id) if isinstance(env_id, str) else None
    if match is None:
        raise invalid("env_id", env_id, "an Atari id such as 'ALE/Pong-v5' or 'Pong-v5'")
    check_int("num_envs", num_envs, minimum=1)
    check_choice("backend", backend, ATARI_BACKENDS)
    check_bool("clip_rewards", clip_rewards)
    check_int("noop_max", noop_max, minimum=1)
    ok = isinstance(repeat_action_probability, (int, float)) and not isinstance(
        repeat_action_probability, bool
    )
    if not ok or not 0.0 <= repeat_action_probability <= 1.0:
        raise invalid("repeat_action_probability", repeat_action_probability, "a number in [0, 1]")
    if render_mode is not None and backend != "gymnasium":
        raise invalid(
            "render_mode", render_mode, "None with backend='envpool' (EnvPool does not render)"
        )
    game_id = f"{match.group(2)}-v5"
    options = {"noop_max": noop_max, "repeat_action_probability": float(repeat_action_probability)}
    if backend == "envpool":
        env = _envpool_atari(env_id, game_id, num_envs, **options)
    else:
        env = _gymnasium_atari(game_id, num_envs, render_mode=render_mode, **options)
    # RewardSum before RewardClipping: episode_reward sums the game's own rewards
    transforms: list[Any] = [RewardSum(), StepCounter()]
    if clip_rewards:
        transforms.append(RewardClipping(-1.0, 1.0))
    return TransformedEnv(env, Compose(*transforms))


def _envpool_atari(
    env_id: str, game_id: str, num_envs: int, *, noop_max: int, repeat_action_probability: float
) -> EnvBase:
    """EnvPool's Atari env with the module's preprocessing (EnvPool's names for each option)."""
    import envpool

    if game_id not in envpool.list_all_envs():
        close = difflib.get_close_matches(game_id, envpool.list_all_envs(), n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise invalid("env_id", env_id, f"an Atari game EnvPool knows{hint}")
    kwargs = {
        "frame_skip": _FRAME_SKIP,
        "stack_num": _FRAME_STACK,
        "img_height": _SCREEN_SIZE,
        "img_width": _SCREEN_SIZE,
        "gray_scale": True,
        "use_inter_area_resize": True,
        "noop_max": noop_max,
        "episodic_life": False,
        "use_fire_reset": False,
        "reward_clip": False,  # clipped by RewardClipping, after RewardSum has read it
        "repeat_action_probability": repeat_action_probability,
        "max_episode_steps": _MAX_EPISODE_FRAMES // _FRAME_SKIP,
        "full_action_space": False,
    }
    return make_envpool_env(game_id, num_envs=num_envs, create_env_kwargs=kwargs)


def _gymnasium_atari(
    game_id: str,
    num_envs: int,
    *,
    noop_max: int,
    repeat_action_probability: float,
    render_mode: str | None = None,
) -> EnvBase:
    """ale-py's env under gymnasium's Atari wrappers, in torchrl's ``GymWrapper``."""
    try:
        import ale_py
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError as err:
        raise ImportError(
            f"backend='gymnasium' needs ale-py and OpenCV for Atari ({err}); install them with "
            f"{install_command('atari')}"
        ) from err
    gym.register_envs(ale_py)  # ale-py registers its ids when imported; this names the need
    # its banner ("A.L.E: ... [Powered by Stella]") at every env, in every worker: errors only
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    check_env_id(f"ALE/{game_id}")
    one = functools.partial(
        _preprocessed_ale, f"ALE/{game_id}", noop_max, repeat_action_probability, render_mode
    )
    if num_envs == 1:
        return GymWrapper(one(), categorical_action_encoding=True)
    # AutoresetMode.DISABLED: torchrl resets ended copies itself, as in make_env
    vector_env = gym.vector.SyncVectorEnv(
        [one] * num_envs, autoreset_mode=gym.vector.AutoresetMode.DISABLED
    )
    return GymWrapper(vector_env, categorical_action_encoding=True)


def _preprocessed_ale(
    ale_id: str, noop_max: int, repeat_action_probability: float, render_mode: str | None = None
) -> gym.Env[Any, Any]:
    """One ale-py env, frame-skipped, grey, resized and stacked as EnvPool's."""
    env = gym.make(
        ale_id,
        render_mode=render_mode,
        frameskip=1,  # AtariPreprocessing skips (and max-pools) the frames itself
        repeat_action_probability=repeat_action_probability,
        full_action_space=False,
        max_num_frames_per_episode=_MAX_EPISODE_FRAMES,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=_FRAME_SKIP,
        screen_size=_SCREEN_SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,  # uint8 frames; the network divides by 255
    )
    return gym.wrappers.FrameStackObservation(env, _FRAME_STACK)
