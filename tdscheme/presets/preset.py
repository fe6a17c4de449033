"""Preset: everything a named training run is made of, as plain, overridable configs.

A preset holds three config dataclasses (the algorithm's ``algo``, the
distribution ``scheme`` and the ``trainer``'s) and a module-level learner builder.
From them it makes the picklable factories a :class:`~tdscheme.Scheme` takes, and
it round-trips through a JSON-compatible dict (``to_dict`` /
``tdscheme.presets.preset_from_dict``), which
is what a run directory's ``config.json`` and its checkpoints hold.

Making, overriding and saving a preset imports no torch (the ``tdscheme``
command checks every setting before it starts Ray); the factories import the
networks, envs and the Scheme when they are called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from tdscheme.engine.trainer_config import TrainerConfig
from tdscheme.presets.settings import ActorCriticConfig
from tdscheme.scheme.config import SchemeConfig

if TYPE_CHECKING:
    from torch import nn

    from tdscheme.engine.trainer import Trainer
    from tdscheme.learner import Learner
    from tdscheme.scheme import Scheme

__all__ = ["Preset"]

_SECTIONS = ("algo", "scheme", "trainer")


@dataclasses.dataclass
class Preset:
    """A named run: algorithm, distribution and trainer configs, and a learner builder.

    Args:
        name: the preset's name in ``tdscheme.presets.PRESETS``.
        learner_builder: a module-level function ``(*, actor, critic, config,
            total_updates) -> Learner``.
        algo: env, network and loss hyperparameters.
        scheme: collectors and weight pushes.
        trainer: frames, evaluation, logging and checkpoints.
        curriculum: a module-level function building the Trainer's curriculum
            (:mod:`tdscheme.engine.curriculum`); with one, each training env copy takes env
            configs (:func:`~tdscheme.envs.env_config.make_configurable_env`) and the
            evaluation env stays as built (the env as registered with ``algo.env_config``
            set: the hardest setting). ``None``: none.

    Example:
        >>> from tdscheme.presets import PRESETS
        >>> preset = PRESETS["ppo-cartpole"]().override({"lr": 1e-3, "num_collectors": 1})
        >>> preset.algo.lr, preset.scheme.num_collectors
        (0.001, 1)
        >>> preset.to_dict()["scheme"]["num_collectors"]
        1
    """

    name: str
    learner_builder: Callable[..., Learner]
    algo: ActorCriticConfig
    scheme: SchemeConfig
    trainer: TrainerConfig
    curriculum: Callable[[], Any] | None = None

    # -- factories ---------------------------------------------------------------------

    def env_factory(self) -> Callable[[], Any]:
        """Builds one collector worker's batched training env."""
        from tdscheme.presets.actor_critic import train_env

        a = self.algo
        return partial(
            train_env, a.env_id, num_envs=a.num_envs, reward_scale=a.reward_scale,
            backend=a.env_backend, configurable=self.curriculum is not None,
            env_config=a.env_config,
        )  # fmt: skip

    def eval_env_factory(self) -> Callable[[], Any]:
        """Builds the evaluation env (the env's own rewards)."""
        from tdscheme.presets.actor_critic import eval_env

        a = self.algo
        return partial(
            eval_env, a.env_id, num_envs=a.eval_num_envs, backend=a.env_backend,
            env_config=a.env_config,
        )  # fmt: skip

    def video_env_factory(self) -> Callable[[], Any]:
        """Builds one eval env that renders, for videos (gymnasium's: EnvPool does not render)."""
        from tdscheme.presets.actor_critic import eval_env

        a = self.algo
        return partial(
            eval_env, a.env_id, backend="gymnasium", render_mode="rgb_array",
            env_config=a.env_config,
        )  # fmt: skip

    def policy_factory(self) -> Callable[[], dict[str, nn.Module]]:
        """Builds ``{"actor": ..., "critic": ...}``."""
        from tdscheme.presets.actor_critic import actor_critic_modules

        a = self.algo
        return partial(
            actor_critic_modules, a.env_id, hidden_sizes=a.hidden_sizes, activation=a.activation,
            backend=a.env_backend, pixel_network=a.pixel_network,
        )  # fmt: skip

    def learner_factory(self) -> Callable[..., Learner]:
        """Builds the Learner from the modules of :meth:`policy_factory`."""
        frames = self.algo.anneal_frames or self.trainer.total_frames
        total_updates = max(1, frames // self.scheme.frames_per_batch)
        return partial(self.learner_builder, config=self.algo, total_updates=total_updates)

    def factories(self) -> dict[str, Callable[..., Any]]:
        """The four factories, as keyword arguments for :class:`~tdscheme.Scheme`."""
        return {
            "env_factory": self.env_factory(),
            "eval_env_factory": self.eval_env_factory(),
            "policy_factory": self.policy_factory(),
            "learner_factory": self.learner_factory(),
        }

    def build_scheme(self) -> Scheme:
        """A new :class:`~tdscheme.Scheme` (starts or joins Ray, starts the collectors)."""
        from tdscheme.scheme import Scheme

        return Scheme(**self.factories(), config=self.scheme)

    def build_trainer(self) -> Trainer:
        """A :class:`~tdscheme.engine.Trainer` that builds and runs this preset's scheme."""
        from tdscheme.engine.trainer import Trainer

        return Trainer(
            self.build_scheme, config=self.trainer, run_config=self.to_dict(),
            video_env_factory=self.video_env_factory(),
            curriculum=None if self.curriculum is None else self.curriculum(),
        )  # fmt: skip

    # -- configuration -------------------------------------------------------------------

    def override(self, values: Mapping[str, Any]) -> Preset:
        """A copy with the named settings replaced, wherever they live.

        Args:
            values: setting names (fields of ``algo``, ``scheme`` or ``trainer``) to values.

        Returns:
            The new preset (its configs validate the new values).

        Raises:
            ValueError: an unknown name, or a value its config rejects.
        """
        by_section: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
        owners = self.setting_owners()
        for key, value in values.items():
            if key not in owners:
                raise ValueError(f"unknown setting {key!r}; accepted: {sorted(owners)}")
            by_section[owners[key]][key] = value
        return dataclasses.replace(
            self,
            **{s: dataclasses.replace(getattr(self, s), **by_section[s]) for s in _SECTIONS},
        )

    def derive(self, name: str, **changes: Any) -> Preset:
        """A new preset from this one: renamed, with ``changes`` to its settings and fields.

        A preset is declared by what makes it differ from the one it derives from, so
        that a setting two presets share is stated once.

        Args:
            name: the new preset's name.
            **changes: setting names (any section, as :meth:`override`) and the
                preset's own fields (``learner_builder``, ``algo_name``).

        Returns:
            The new preset.

        Example:
            >>> from tdscheme.presets import get_preset
            >>> slow = get_preset("ppo-cartpole").derive("ppo-cartpole-slow", lr=1e-4)
            >>> slow.name, slow.algo.lr, slow.algo.env_id
            ('ppo-cartpole-slow', 0.0001, 'CartPole-v1')
        """
        fields = {f.name for f in dataclasses.fields(self)} - set(_SECTIONS)
        own = {k: changes.pop(k) for k in list(changes) if k in fields}
        return dataclasses.replace(self.override(changes), name=name, **own)

    def missing_packages(self) -> list[tuple[str, ImportError]]:
        """The optional packages this run needs that are not installed, each with its setting.

        Checked without importing them (nor torch): the env's backend or id
        (``envpool``, ``atari``, ``mujoco``), the logger (``loggers``,
        ``tensorboard``) and videos (``video``, and the video env's renderer).

        Returns:
            ``(setting name, ImportError naming the extra)`` pairs, in that order; empty
            when everything is installed.
        """
        from tdscheme.engine.extras import missing_logger_package, missing_video_packages
        from tdscheme.envs.ids import missing_env_packages

        a, t = self.algo, self.trainer
        env_setting = "env_backend" if a.env_backend == "envpool" else "env_id"
        found = [
            (env_setting, missing_env_packages(a.env_id, backend=a.env_backend)),
            ("logger", missing_logger_package(t.logger)),
        ]
        if t.video:  # the video env is gymnasium's, rendering (see video_env_factory)
            found.append(("video", missing_video_packages()))
            found.append(("video", missing_env_packages(a.env_id, render=True)))
        return [(name, err) for name, err in found if err is not None]

    def setting_owners(self) -> dict[str, str]:
        """Every setting name and the section (``algo``, ``scheme``, ``trainer``) it belongs to."""
        owners: dict[str, str] = {}
        for section in _SECTIONS:
            for field in dataclasses.fields(getattr(self, section)):
                if field.name in owners:
                    raise RuntimeError(f"setting {field.name!r} is defined twice")
                owners[field.name] = section
        return owners

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible dict: ``{"preset": name, "algo": {...}, "scheme": {...}, "trainer": {...}}``."""
        out: dict[str, Any] = {"preset": self.name}
        for section in _SECTIONS:
            out[section] = _jsonable(dataclasses.asdict(getattr(self, section)))
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
