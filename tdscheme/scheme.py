"""Scheme: a training run composed from factories, iterated as collect -> learn -> push.

A :class:`Scheme` builds the :class:`~tdscheme.learner.Learner` on the driver and
a :class:`~tdscheme.RayCollector` whose workers run the learner's policy. Each
iteration takes one batch from the collector, trains the learner on it, pushes
fresh weights every ``weight_push_interval`` updates and returns flat metrics.
The :class:`~tdscheme.engine.Trainer` runs a Scheme with logging, evaluation and
checkpoints; a user can also iterate one in their own loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdscheme.collectors import MASK_KEY, POLICY_VERSION_KEY, RayCollector
from tdscheme.learner import Learner
from tdscheme.scheme_config import GRAD_COMMUNICATIONS, SchemeConfig

__all__ = ["GRAD_COMMUNICATIONS", "Scheme", "SchemeConfig"]

logger = logging.getLogger(__name__)

EnvFactory = Callable[[], Any]
PolicyFactory = Callable[[], "nn.Module | Mapping[str, nn.Module]"]
LearnerFactory = Callable[..., Learner]


class Scheme:
    """Composes a run from factories and iterates collect -> learn -> push.

    ``policy_factory()`` returns the modules the algorithm needs, as a dict such as
    ``{"actor": ProbabilisticActor, "critic": ValueOperator}`` (or one module, taken
    as ``{"actor": module}``); ``learner_factory(**modules)`` builds the
    :class:`~tdscheme.learner.Learner` from them. The collector workers run
    ``learner.policy`` (the actor the loss was built with). Factories should be
    module-level functions or ``functools.partial`` of them, so that Ray (and later
    gradient workers) can pickle them.

    Each :meth:`step` returns a flat dict of floats:

    * ``frames``, ``iteration``, ``fps`` (frames trained on per second since the
      first step), ``time/iteration_s``, ``time/wait_s``, ``time/learn_s``;
    * ``train/episode_return``, ``train/episode_length``, ``train/episodes`` over the
      episodes that finished in the batch (present when some did and the env
      records ``("next", "episode_reward")`` / ``("next", "step_count")``, e.g.
      with torchrl's ``RewardSum`` and ``StepCounter`` transforms);
    * ``learner/<name>``: every metric of ``Learner.update`` (losses, ``grad_norm``,
      ``lr``, ...);
    * ``policy_lag/mean``, ``policy_lag/max``: weight pushes between the batch's
      weights and the newest ones, over its frames;
    * ``collector/<name>``: the numeric counters and timers of
      ``RayCollector.stats()``.

    Args:
        env_factory: builds one collector worker's (possibly batched) torchrl env.
        policy_factory: builds the modules, see above.
        learner_factory: builds the Learner from the modules.
        eval_env_factory: builds the evaluation env (kept for the Trainer).
        config: distribution settings (``SchemeConfig()`` when ``None``).

    Raises:
        TypeError: a factory is not callable, or returns the wrong type.
        ValueError: ``policy_factory`` returns a dict without an ``"actor"``.
        NotImplementedError: ``config.num_grad_workers > 0`` (not implemented yet).

    Example:
        >>> # Needs Ray; see examples/ and tdscheme.presets
        >>> from tdscheme.presets import PRESETS  # doctest: +SKIP
        >>> preset = PRESETS["ppo-cartpole"]()  # doctest: +SKIP
        >>> with Scheme(**preset.factories(), config=preset.scheme) as scheme:  # doctest: +SKIP
        ...     for metrics in scheme:
        ...         print(metrics["frames"], metrics.get("train/episode_return"))
        ...         if metrics["frames"] >= 20_000:
        ...             break
    """

    def __init__(
        self,
        *,
        env_factory: EnvFactory,
        policy_factory: PolicyFactory,
        learner_factory: LearnerFactory,
        eval_env_factory: EnvFactory | None = None,
        config: SchemeConfig | None = None,
    ) -> None:
        self.config = SchemeConfig() if config is None else config
        if not isinstance(self.config, SchemeConfig):
            raise TypeError(f"config must be a SchemeConfig or None, got {self.config!r}")
        for name, factory in (
            ("env_factory", env_factory),
            ("policy_factory", policy_factory),
            ("learner_factory", learner_factory),
        ):
            if not callable(factory):
                raise TypeError(f"{name}={factory!r} is not callable; accepted: a function")
        if eval_env_factory is not None and not callable(eval_env_factory):
            raise TypeError(
                f"eval_env_factory={eval_env_factory!r} is not callable; accepted: a function or None"
            )
        if self.config.num_grad_workers > 0:
            raise NotImplementedError(
                f"num_grad_workers={self.config.num_grad_workers}: gradient workers are not "
                f"implemented yet; accepted: 0"
            )
        self.env_factory = env_factory
        self.eval_env_factory = eval_env_factory
        self.policy_factory = policy_factory
        self.learner_factory = learner_factory
        self._closed = True  # until the collector exists
        if self.config.seed is not None:
            torch.manual_seed(self.config.seed)
        self.modules = _as_modules(policy_factory())
        self.learner = learner_factory(**self.modules)
        if not isinstance(self.learner, Learner):
            raise TypeError(
                f"learner_factory must return a tdscheme Learner, got {type(self.learner).__name__}"
            )
        self.frames = 0
        self.iterations = 0
        self._session_frames = 0
        self._updates_since_push = 0
        self._batches: Iterator[TensorDictBase] | None = None
        self._started_at: float | None = None
        self.collector = self._build_collector()
        self._closed = False

    def _build_collector(self) -> RayCollector:
        cfg = self.config
        return RayCollector(
            self.env_factory,
            self.learner.policy,
            frames_per_batch=cfg.frames_per_batch,
            total_frames=-1,
            num_collectors=cfg.num_collectors,
            sync=cfg.sync,
            preemption=cfg.preemption,
            max_policy_lag=cfg.max_policy_lag,
            prefetch_batches=cfg.prefetch_batches,
            compress=cfg.compress,
            remote_configs=cfg.collector_resources,
            ray_init_config=cfg.ray_init_config,
            seed=cfg.seed,
            batch_timeout_s=cfg.batch_timeout_s,
        )

    @property
    def policy(self) -> nn.Module:
        """The learner's (always up to date) policy, e.g. for evaluation."""
        return self.learner.policy

    def step(self) -> dict[str, float]:
        """Runs one iteration: wait for a batch, train on it, push weights when due.

        Returns:
            The iteration's metrics (see the class docstring).

        Raises:
            RuntimeError: the scheme is shut down.
            tdscheme.WorkerError: a collector worker failed for good.
        """
        if self._closed:
            raise RuntimeError("Scheme is shut down")
        if self._batches is None:
            self._batches = iter(self.collector)
            self._started_at = time.perf_counter()
        start = time.perf_counter()
        batch = next(self._batches)
        got_batch = time.perf_counter()
        learner_metrics = self.learner.update(batch)
        learned = time.perf_counter()
        self._updates_since_push += 1
        if self._updates_since_push >= self.config.weight_push_interval:
            self.collector.update_policy_weights_(self.learner.policy_weights())
            self._updates_since_push = 0
        frames = int(learner_metrics["num_frames"].item())
        self.frames += frames
        self._session_frames += frames
        self.iterations += 1
        now = time.perf_counter()
        metrics: dict[str, float] = {
            "frames": float(self.frames),
            "iteration": float(self.iterations),
            "fps": self._session_frames / max(now - self._started_at, 1e-9),
            "time/iteration_s": now - start,
            "time/wait_s": got_batch - start,
            "time/learn_s": learned - got_batch,
        }
        metrics.update(episode_metrics(batch))
        metrics.update({f"learner/{k}": float(v) for k, v in learner_metrics.items()})
        metrics.update(self._lag_metrics(batch))
        metrics.update(self._collector_metrics())
        return metrics

    def __iter__(self) -> Iterator[dict[str, float]]:
        """Yields :meth:`step` forever; stop when you have trained enough."""
        while True:
            yield self.step()

    def _lag_metrics(self, batch: TensorDictBase) -> dict[str, float]:
        versions = batch.get(POLICY_VERSION_KEY, None)
        if versions is None:
            return {}
        mask = batch.get(MASK_KEY, None)
        if mask is not None:
            versions = versions[mask.bool()]
        # The push that followed this update does not count: the batch was used before it.
        newest = self.collector.policy_version - (1 if self._updates_since_push == 0 else 0)
        lag = (newest - versions).clamp_min(0).float()
        return {"policy_lag/mean": lag.mean().item(), "policy_lag/max": lag.max().item()}

    def _collector_metrics(self) -> dict[str, float]:
        stats = self.collector.stats()
        return {
            f"collector/{key}": float(value)
            for key, value in stats.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }

    # -- state ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The learner's state, the counters and the collector's state.

        Returns:
            Plain data (tensors, numbers, dicts) that a checkpoint holds as is.
        """
        return {
            "learner": self.learner.state_dict(),
            "frames": self.frames,
            "iterations": self.iterations,
            "updates_since_push": self._updates_since_push,
            "collector": self.collector.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` and pushes the restored weights to the workers.

        Call it before the first :meth:`step`: batches already in flight were
        collected with the weights the workers had.

        Args:
            state: a dict from :meth:`state_dict` of a scheme built the same way.

        Raises:
            ValueError: keys are missing or the learner state does not fit.
        """
        missing = {"learner", "frames", "iterations", "collector"} - set(state)
        if missing:
            raise ValueError(f"state is missing {sorted(missing)}; pass Scheme.state_dict()")
        self.learner.load_state_dict(state["learner"])
        self.frames = int(state["frames"])
        self.iterations = int(state["iterations"])
        self._updates_since_push = int(state.get("updates_since_push", 0))
        self.collector.load_state_dict(state["collector"])
        self.collector.update_policy_weights_(self.learner.policy_weights())

    # -- lifetime ------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stops the collector workers and releases Ray. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.collector.shutdown()

    def __enter__(self) -> Scheme:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"Scheme(frames={self.frames}, iterations={self.iterations}, "
            f"num_collectors={self.config.num_collectors}, learner={self.learner!r})"
        )


def _as_modules(built: Any) -> dict[str, nn.Module]:
    if isinstance(built, nn.Module):
        return {"actor": built}
    if not isinstance(built, Mapping):
        raise TypeError(
            f"policy_factory must return an nn.Module or a dict of them such as "
            f"{{'actor': ..., 'critic': ...}}, got {type(built).__name__}"
        )
    if "actor" not in built:
        raise ValueError(
            f"policy_factory returned a dict with keys {sorted(built)}; accepted: a dict "
            f"with an 'actor' key (the module the collectors run)"
        )
    return dict(built)


def episode_metrics(batch: TensorDictBase) -> dict[str, float]:
    """Mean return and length of the episodes that finished in ``batch``.

    Args:
        batch: collected frames with ``("next", "done")`` and, from torchrl's
            ``RewardSum`` and ``StepCounter`` transforms, ``("next",
            "episode_reward")`` and ``("next", "step_count")``.

    Returns:
        ``train/episode_return``, ``train/episode_length`` (when recorded) and
        ``train/episodes``; empty when no episode finished or nothing is recorded.

    Example:
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"next": TensorDict(
        ...     done=torch.tensor([[False], [True], [True]]),
        ...     episode_reward=torch.tensor([[1.0], [2.0], [4.0]]),
        ...     step_count=torch.tensor([[1], [2], [6]]), batch_size=[3])}, batch_size=[3])
        >>> episode_metrics(batch)
        {'train/episodes': 2.0, 'train/episode_return': 3.0, 'train/episode_length': 4.0}
    """
    done = batch.get(("next", "done"), None)
    returns = batch.get(("next", "episode_reward"), None)
    if done is None or returns is None:
        return {}
    done = done.reshape(returns.shape)
    mask = batch.get(MASK_KEY, None)
    if mask is not None:
        done = done & mask.reshape(*mask.shape, *([1] * (done.ndim - mask.ndim))).bool()
    if not done.any():
        return {}
    out = {"train/episodes": float(done.sum().item())}
    out["train/episode_return"] = returns[done].float().mean().item()
    lengths = batch.get(("next", "step_count"), None)
    if lengths is not None:
        out["train/episode_length"] = lengths.reshape(done.shape)[done].float().mean().item()
    return out
