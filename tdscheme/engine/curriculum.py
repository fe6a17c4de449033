"""Curricula: env configs a Trainer changes as the agent improves, versioned and checkpointed.

``Trainer(curriculum=...)`` takes a callable ``curriculum(episodes) -> config | None``.
After every training step the Trainer hands it the recent episodes
(:class:`RecentEpisodes`: their returns, the env-config version each started under and the task,
the newest version pushed); a config it returns is pushed to the workers with
``Scheme.set_env_config`` (each env copy runs it from its next reset, unless the
curriculum's ``apply`` attribute says ``"now"``). A curriculum object may also have:

* ``initial_config()``: the config pushed before the first step of a new run;
* ``apply`` and ``apply_env_config``: passed with every push;
* ``state_dict()`` / ``load_state_dict(state)``: its state, kept in checkpoints with the
  version and the recent episodes, so a resumed run goes on from the same level and
  version.

:class:`ThresholdCurriculum` is the built-in one: a list of levels, promoted when the
mean return at the current level reaches a threshold, demoted below another.

Example:
    >>> curriculum = ThresholdCurriculum([{"g": 2.0}, {"g": 6.0}, {"g": 10.0}],
    ...                                  promote_at=-400.0, min_episodes=2)
    >>> curriculum.initial_config()
    {'g': 2.0}
    >>> curriculum(RecentEpisodes([-900.0, -300.0], [-1, -1], [1, 1], version=1)) is None
    True
    >>> curriculum(RecentEpisodes([-300.0, -350.0], [-1, -1], [1, 1], version=1))
    {'g': 6.0}
    >>> curriculum.level, curriculum.state_dict()
    (1, {'level': 1})
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tdscheme.rollout.env_config_state import encode_env_config
from tdscheme.validation import check_choice, check_int, invalid

__all__ = ["CurriculumRunner", "RecentEpisodes", "ThresholdCurriculum"]

logger = logging.getLogger(__name__)

#: Episodes a curriculum sees at most (the newest).
WINDOW = 1000


@dataclasses.dataclass(frozen=True)
class RecentEpisodes:
    """The episodes that ended lately, oldest first, as a curriculum sees them.

    Attributes:
        returns: each episode's return.
        tasks: the level index each ran (a task distribution's), -1 without one.
        versions: the env-config version each started under (an episode the workers
            switched midway counts at its old level; with gradient workers, which report
            no versions: the newest pushed when it was reported).
        version: the newest env-config version pushed (0: none yet).
    """

    returns: list[float]
    tasks: list[int]
    versions: list[int]
    version: int

    def at_version(self, version: int | None = None) -> list[float]:
        """The returns of the episodes that ran ``version`` (``None``: the newest pushed)."""
        version = self.version if version is None else version
        return [r for r, v in zip(self.returns, self.versions, strict=True) if v == version]


class ThresholdCurriculum:
    """Levels in order of difficulty, promoted and demoted on the mean return at the current one.

    After every step it averages the returns of the last ``min_episodes`` episodes that
    ran the current level's version (fewer: no decision): at ``promote_at`` or above it
    moves to the next level, below ``demote_at`` back to the previous one.

    Args:
        levels: the env configs, easiest first.
        promote_at: the mean return that promotes (one number, or one per level).
        demote_at: the mean return below which it demotes (``None``: never).
        min_episodes: episodes at the current level a decision needs.
        start_level: the level a new run starts at.
        apply: ``"reset"`` (each env copy switches at its next reset) or ``"now"``.
        apply_env_config: ``fn(env, config)`` for envs without ``set_env_config``: a
            module-level function (a checkpoint stores it by its import path).

    Raises:
        ValueError: no levels, a bad threshold list, level or count (named).
        TypeError: a level or ``apply_env_config`` a checkpoint cannot hold (a lambda, a
            local function; :mod:`tdscheme.rollout.env_config_state`), or an
            ``apply_env_config`` that is not callable: refused here, not when pushed.
    """

    def __init__(
        self,
        levels: Sequence[Any],
        *,
        promote_at: float | Sequence[float],
        demote_at: float | Sequence[float] | None = None,
        min_episodes: int = 20,
        start_level: int = 0,
        apply: str = "reset",
        apply_env_config: Callable[[Any, Any], None] | None = None,
    ) -> None:
        if not isinstance(levels, Sequence) or isinstance(levels, str) or not levels:
            raise invalid("levels", levels, "a non-empty list of env configs")
        self.levels = list(levels)
        self._promote = _per_level("promote_at", promote_at, len(self.levels))
        self._demote = (
            None if demote_at is None else _per_level("demote_at", demote_at, len(levels))
        )
        check_int("min_episodes", min_episodes, minimum=1)
        check_int("start_level", start_level, minimum=0)
        if start_level >= len(self.levels):
            raise invalid("start_level", start_level, f"a level in 0..{len(self.levels) - 1}")
        check_choice("apply", apply, ("reset", "now"))
        if apply_env_config is not None and not callable(apply_env_config):
            raise TypeError(
                f"apply_env_config={apply_env_config!r} is invalid; accepted: None or a "
                "module-level function fn(env, config)"
            )
        for i, level in enumerate(self.levels):  # each is pushed, and checkpointed, later
            encode_env_config(level, name=f"levels[{i}]")
        encode_env_config(apply_env_config, name="apply_env_config")
        self.min_episodes = min_episodes
        self.level = start_level
        self.apply = apply
        self.apply_env_config = apply_env_config

    def initial_config(self) -> Any:
        """The config of the level a new run starts at."""
        return self.levels[self.level]

    def __call__(self, episodes: RecentEpisodes) -> Any:
        """The next level's (or the previous one's) config, or ``None`` to stay."""
        current = episodes.at_version()
        if len(current) < self.min_episodes:
            return None
        mean = sum(current[-self.min_episodes :]) / self.min_episodes
        step = 0
        if mean >= self._promote[self.level] and self.level < len(self.levels) - 1:
            step = 1
        elif self._demote is not None and mean < self._demote[self.level] and self.level > 0:
            step = -1
        if not step:
            return None
        self.level += step
        logger.info(
            "curriculum: %s to level %d (mean return %.3g over %d episodes)",
            "promoted" if step > 0 else "demoted", self.level, mean, self.min_episodes,
        )  # fmt: skip
        return self.levels[self.level]

    def state_dict(self) -> dict[str, int]:
        """``{"level": the current level}``."""
        return {"level": self.level}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        self.level = int(state["level"])


def _per_level(name: str, value: float | Sequence[float], levels: int) -> list[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)] * levels
    values = list(value) if isinstance(value, Sequence) else []
    if len(values) != levels or not all(isinstance(v, (int, float)) for v in values):
        raise invalid(name, value, f"a number, or {levels} numbers (one per level)")
    return [float(v) for v in values]


class CurriculumRunner:
    """The Trainer's side of a curriculum: recent episodes in, env configs out, state kept.

    Args:
        curriculum: ``curriculum(RecentEpisodes) -> config | None`` (see the module), or
            ``None`` (nothing happens).

    Raises:
        TypeError: ``curriculum`` is not callable.
    """

    def __init__(self, curriculum: Callable[[RecentEpisodes], Any] | None) -> None:
        if curriculum is not None and not callable(curriculum):
            raise TypeError(
                f"curriculum={curriculum!r} is invalid; accepted: None or a callable "
                "curriculum(episodes) -> env config or None (e.g. ThresholdCurriculum)"
            )
        self.curriculum = curriculum
        self.version = 0
        self._window: collections.deque = collections.deque(maxlen=WINDOW)

    def start(self, scheme: Any, resume_state: Mapping[str, Any] | None) -> None:
        """Restores the state of a resumed run, or pushes a new run's ``initial_config()``."""
        if self.curriculum is None:
            return
        state = (resume_state or {}).get("curriculum")
        if state is not None:
            self.load_state_dict(state)
        elif hasattr(self.curriculum, "initial_config"):
            self._push(scheme, self.curriculum.initial_config())

    def step(self, scheme: Any) -> dict[str, float]:
        """After a training step: the curriculum sees the recent episodes; returns metrics."""
        if self.curriculum is None:
            return {}
        episodes = scheme.last_episodes
        if episodes is not None:
            n = len(episodes.returns)
            tasks = episodes.tasks or [-1] * n
            versions = episodes.versions or [self.version] * n
            self._window.extend(zip(episodes.returns, tasks, versions, strict=True))
        columns = [list(c) for c in zip(*self._window, strict=True)] or [[], [], []]
        returns, tasks, versions = columns
        config = self.curriculum(RecentEpisodes(returns, tasks, versions, self.version))
        if config is not None:
            self._push(scheme, config)
        metrics = {"curriculum/version": float(self.version)}
        level = getattr(self.curriculum, "level", None)
        if isinstance(level, int):
            metrics["curriculum/level"] = float(level)
        return metrics

    def _push(self, scheme: Any, config: Any) -> None:
        self.version = scheme.set_env_config(
            config,
            apply=getattr(self.curriculum, "apply", "reset"),
            apply_env_config=getattr(self.curriculum, "apply_env_config", None),
        )

    def state_dict(self) -> dict[str, Any] | None:
        """``{"version", "episodes", "state"}`` (the curriculum's own), or ``None`` without one."""
        if self.curriculum is None:
            return None
        state_dict = getattr(self.curriculum, "state_dict", None)
        return {
            "version": self.version,
            "episodes": [list(episode) for episode in self._window],
            "state": None if state_dict is None else state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` (the env configs themselves come back with the scheme)."""
        self.version = int(state["version"])
        self._window.clear()
        self._window.extend((float(r), int(t), int(v)) for r, t, v in state["episodes"])
        load = getattr(self.curriculum, "load_state_dict", None)
        if load is not None and state.get("state") is not None:
            load(state["state"])
