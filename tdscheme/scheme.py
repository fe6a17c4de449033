"""Scheme: a training run composed from factories, iterated as collect -> learn -> push.

A :class:`Scheme` builds the :class:`~tdscheme.learner.Learner` on the driver and
a :class:`~tdscheme.RayCollector` whose workers run the learner's policy. Each
iteration takes one batch from the collector, trains the learner on it, pushes
fresh weights every ``weight_push_interval`` updates and returns flat metrics.
With ``num_grad_workers > 0`` it builds gradient workers instead
(:mod:`tdscheme.scheme_grad_workers`) and each iteration is one step of their
coordinator. The :class:`~tdscheme.engine.Trainer` runs a Scheme with logging,
evaluation and checkpoints; a user can also iterate one in their own loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdscheme.batch_metrics import episode_metrics
from tdscheme.collectors import MASK_KEY, POLICY_VERSION_KEY, RayCollector
from tdscheme.gradient_workers import GradientCoordinator
from tdscheme.learner import Learner
from tdscheme.scheme_config import GRAD_COMMUNICATIONS, SchemeConfig
from tdscheme.scheme_grad_workers import build_coordinator, scheme_metrics

__all__ = ["GRAD_COMMUNICATIONS", "Scheme", "SchemeConfig", "episode_metrics"]

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

    With gradient workers (``config.num_grad_workers > 0``) there is no driver
    collector: each worker collects and computes gradients, and the coordinator
    (``self.coordinator``) turns them into updates of the driver's Learner
    (synchronous, asynchronous) or has the workers all-reduce them and mirrors
    rank 0's weights into the driver's Learner after every step (decentralized),
    so :attr:`policy` is always the newest policy. Each :meth:`step` is one
    coordinator step and returns ``frames``, ``iteration``, ``fps``,
    ``time/iteration_s``, ``train/episode_return`` and ``train/episodes`` (when an
    episode ended), ``learner/<name>`` (the workers' frame-weighted loss metrics,
    ``grad_norm``, ``lr``) and ``grad_workers/<name>``: ``wait_ms``, ``apply_ms``,
    ``dispatch_ms``, ``step_ms``, the workers' ``collect_ms``/``compute_ms``,
    ``grads_applied``, ``grads_dropped``, ``frames_dropped``, ``updates``,
    ``version``, ``restarts`` and, per mode, ``preempted``, ``staleness_mean``,
    ``staleness_max``, ``allreduce_ms``, ``mirror_ms`` (see
    :func:`tdscheme.scheme_grad_workers.scheme_metrics`).

    Args:
        env_factory: builds one collector worker's (possibly batched) torchrl env.
        policy_factory: builds the modules, see above.
        learner_factory: builds the Learner from the modules.
        eval_env_factory: builds the evaluation env (kept for the Trainer).
        config: distribution settings (``SchemeConfig()`` when ``None``).

    Raises:
        TypeError: a factory is not callable, or returns the wrong type.
        ValueError: ``policy_factory`` returns a dict without an ``"actor"``.
        tdscheme.gradient_workers.GradientWorkerError: a gradient worker failed to start.

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
        self.collector: RayCollector | None = None
        self.coordinator: GradientCoordinator | None = None
        if self.config.num_grad_workers > 0:
            self.coordinator = build_coordinator(
                self.config, env_factory=env_factory, policy_factory=policy_factory,
                learner_factory=learner_factory, learner=self.learner,
            )  # fmt: skip
        else:
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

        With gradient workers: one step of their coordinator.

        Returns:
            The iteration's metrics (see the class docstring).

        Raises:
            RuntimeError: the scheme is shut down.
            tdscheme.WorkerError: a collector worker failed for good.
            tdscheme.gradient_workers.GradientWorkerError: a gradient worker failed
                for good.
            TimeoutError: no gradient arrived within ``config.batch_timeout_s``.
        """
        if self._closed:
            raise RuntimeError("Scheme is shut down")
        if self.coordinator is not None:
            return self._gradient_step()
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

    def _gradient_step(self) -> dict[str, float]:
        if self._started_at is None:
            self._started_at = time.perf_counter()
        start = time.perf_counter()
        step = self.coordinator.step()
        frames = int(step["frames"])
        self.frames += frames
        self._session_frames += frames
        self.iterations += 1
        now = time.perf_counter()
        metrics: dict[str, float] = {
            "frames": float(self.frames),
            "iteration": float(self.iterations),
            "fps": self._session_frames / max(now - self._started_at, 1e-9),
            "time/iteration_s": now - start,
        }
        metrics.update(scheme_metrics(step, mode=self.coordinator.mode, learner=self.learner))
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
        """The learner's state, the counters and the collector's (or gradient workers') state.

        With gradient workers, ``"learner"`` is the Learner state the workers
        continue from (in decentralized mode rank 0's, whose optimizer is the one
        in use) and ``"grad_workers"`` the coordinator's mode and totals.

        Returns:
            Plain data (tensors, numbers, dicts) that a checkpoint holds as is.
        """
        if self.coordinator is not None:
            coordinator = self.coordinator.state_dict()
            return {
                "learner": coordinator.pop("learner"),
                "frames": self.frames,
                "iterations": self.iterations,
                "grad_workers": coordinator,
            }
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
        collected with the weights the workers had. With gradient workers, the
        gradients in flight are waited for and discarded, and every worker loads
        the restored state.

        Args:
            state: a dict from :meth:`state_dict` of a scheme built the same way.

        Raises:
            ValueError: keys are missing, the learner state does not fit, or the
                state comes from a scheme with (or without) gradient workers, or
                with gradient workers of another mode, unlike this one.
        """
        part = "collector" if self.coordinator is None else "grad_workers"
        missing = {"learner", "frames", "iterations", part} - set(state)
        if missing:
            other = "grad_workers" if part == "collector" else "collector"
            hint = (
                f"; it was saved by a scheme {'with' if other == 'grad_workers' else 'without'} "
                f"gradient workers, this one has num_grad_workers={self.config.num_grad_workers}"
                if other in state
                else ""
            )
            raise ValueError(
                f"state is missing {sorted(missing)}{hint}; pass Scheme.state_dict() of a "
                f"scheme built the same way"
            )
        if self.coordinator is not None:
            self.coordinator.load_state_dict({**state["grad_workers"], "learner": state["learner"]})
            self.frames = int(state["frames"])
            self.iterations = int(state["iterations"])
            return
        self.learner.load_state_dict(state["learner"])
        self.frames = int(state["frames"])
        self.iterations = int(state["iterations"])
        self._updates_since_push = int(state.get("updates_since_push", 0))
        self.collector.load_state_dict(state["collector"])
        self.collector.update_policy_weights_(self.learner.policy_weights())

    def set_seed(self, seed: int) -> int:
        """Reseeds every worker's envs (and, for gradient workers, their torch) from ``seed``.

        The Trainer calls it after a resume, so that a resumed run's envs do not
        replay the first session's.

        Args:
            seed: the base seed; each worker gets a distinct one derived from it.

        Returns:
            ``seed``.
        """
        if self.coordinator is not None:
            return self.coordinator.set_seed(seed)
        return self.collector.set_seed(seed)

    # -- lifetime ------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stops the collector (or gradient) workers and releases Ray. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.coordinator is not None:
            self.coordinator.shutdown()
        if self.collector is not None:
            self.collector.shutdown()

    def __enter__(self) -> Scheme:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"Scheme(frames={self.frames}, iterations={self.iterations}, "
            f"num_collectors={self.config.num_collectors}, "
            f"num_grad_workers={self.config.num_grad_workers}, learner={self.learner!r})"
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
