"""GradWorkerLoop: the way to train with gradient workers, and their metrics' Scheme names.

One of the Scheme's training loops (see :mod:`tdscheme.scheme.scheme`): when
``SchemeConfig.num_grad_workers > 0`` there is no driver-side collector; a
:class:`~tdscheme.gradient_workers.GradientCoordinator` runs workers that collect
with their own collectors and compute gradients with their own learner copies.
Each step is one coordinator step; :func:`scheme_metrics` renames its metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tdscheme.episodes import FinishedEpisodes
from tdscheme.gradient_workers import GradientCoordinator, build_gradient_coordinator
from tdscheme.learner import Learner
from tdscheme.scheme.config import SchemeConfig
from tdscheme.scheme.loop import NoReplayBuffer

__all__ = ["GradWorkerLoop", "scheme_metrics"]

#: Coordinator step metrics reported as ``grad_workers/<name>`` (besides every ``*_ms`` timer).
_COORDINATOR_KEYS = frozenset(
    {
        "frames_collected",
        "frames_dropped",
        "grads_applied",
        "grads_dropped",
        "grads_nonfinite",
        "grads_nonfinite_total",
        "hung",
        "updates",
        "preempted",
        "staleness_mean",
        "staleness_max",
        "staleness_dropped_max",
        "version",
        "restarts",
    }
)


def scheme_metrics(step: Mapping[str, float], *, mode: str, learner: Learner) -> dict[str, float]:
    """Renames one coordinator step's metrics to the Scheme's names.

    * ``episode_return_mean``, ``episodes`` -> ``train/episode_return``,
      ``train/episodes`` (only when an episode ended, as with collectors);
    * the counters (``grads_applied``, ``grads_dropped``, ``grads_nonfinite``
      (``_total``), ``frames_dropped``, ``updates``, ``preempted``,
      ``staleness_*``, ``version``, ``restarts``, ``hung``) and
      every timer (``wait_ms``, ``apply_ms``, ``dispatch_ms``, ``step_ms``,
      ``collect_ms``, ...) -> ``grad_workers/<name>``;
    * the workers' loss metrics (``loss_objective``, ``grad_norm``, ...) ->
      ``learner/<name>``; ``learner/lr`` is the driver Learner's in centralized
      modes (the workers never step their schedulers there).

    The per-step ``frames`` is left out: the Scheme reports its running total.

    Args:
        step: what ``GradientCoordinator.step()`` returned.
        mode: the coordinator's mode.
        learner: the driver's Learner.

    Returns:
        Flat float metrics.

    Example:
        >>> from tdscheme.presets import get_preset
        >>> preset = get_preset("ppo-cartpole")
        >>> modules = preset.policy_factory()()
        >>> learner = preset.learner_factory()(**modules)
        >>> out = scheme_metrics({"frames": 64.0, "episodes": 2.0, "episode_return_mean": 20.0,
        ...                       "wait_ms": 3.0, "staleness_max": 1.0, "loss_objective": 0.5},
        ...                      mode="asynchronous", learner=learner)
        >>> sorted(out)  # doctest: +NORMALIZE_WHITESPACE
        ['grad_workers/staleness_max', 'grad_workers/wait_ms', 'learner/loss_objective',
         'learner/lr', 'train/episode_return', 'train/episodes']
    """
    out: dict[str, float] = {}
    for key, value in step.items():
        if key == "frames":
            continue
        if key == "episodes":
            if value > 0:
                out["train/episodes"] = float(value)
        elif key == "episode_return_mean":
            out["train/episode_return"] = float(value)
        elif key in _COORDINATOR_KEYS or key.endswith("_ms"):
            out[f"grad_workers/{key}"] = float(value)
        else:
            out[f"learner/{key}"] = float(value)
    if mode != "decentralized":
        out["learner/lr"] = float(learner.optimizer.param_groups[0]["lr"])
    return out


class GradWorkerLoop(NoReplayBuffer):
    """Gradient workers collect and compute gradients; a coordinator turns them into updates.

    Centralized modes update the driver's Learner; decentralized mode mirrors rank
    0's weights into it after every step, so ``learner.policy`` is always the
    newest policy. A :class:`~tdscheme.scheme.loop.TrainingLoop` without a driver-side
    collector or a replay buffer.

    Args:
        config: the Scheme's settings (``num_grad_workers > 0``).
        env_factory: builds one collector's env, in each worker.
        policy_factory: builds the modules, in each worker.
        learner_factory: ``learner_factory(**modules) -> Learner``, in each worker.
        learner: the driver's Learner; the workers start from its state.

    Raises:
        tdscheme.errors.GradientWorkerError: a worker failed to start.
    """

    #: The key of this loop's part of ``Scheme.state_dict()``.
    state_key = "grad_workers"
    collector: None = None
    coordinator: GradientCoordinator
    episodes: FinishedEpisodes | None = None  # the last step's (mean returns: see step)

    def __init__(
        self,
        config: SchemeConfig,
        *,
        env_factory: Callable[[], Any],
        policy_factory: Callable[[], Any],
        learner_factory: Callable[..., Learner],
        learner: Learner,
    ) -> None:
        self.learner = learner
        self.coordinator = build_gradient_coordinator(
            config.grad_workers_config(),
            env_factory=env_factory,
            policy_factory=policy_factory,
            learner_factory=learner_factory,
            learner=learner,
            ray_init_config=config.ray_init_config,
        )

    def step(self) -> tuple[int, dict[str, float]]:
        """One coordinator step: ``(frames trained on, metrics)`` (see :func:`scheme_metrics`).

        The workers report the mean return of the episodes that ended and their count,
        not each one: :attr:`episodes` holds that mean once per episode, with no tasks.
        """
        step = self.coordinator.step()
        metrics = scheme_metrics(step, mode=self.coordinator.mode, learner=self.learner)
        count = int(step.get("episodes", 0))
        mean = step.get("episode_return_mean")
        self.episodes = FinishedEpisodes([float(mean)] * count, None) if count and mean else None
        return int(step["frames"]), metrics

    def set_env_config(self, config: Any, **kwargs: Any) -> int:
        """``GradientCoordinator.set_env_config``: to every gradient worker's collectors."""
        return self.coordinator.set_env_config(config, **kwargs)

    def wait_for_env_config(self, version: int | None = None, timeout_s: float = 60.0) -> list[int]:
        """The version each worker runs: a push to gradient workers waits for their acks."""
        return self.coordinator.env_configs.acked_versions()

    def push_weights(self) -> None:
        """Nothing to push: the coordinator sends weights with every request."""

    def state_dict(self) -> dict[str, Any]:
        """``{"learner", "grad_workers"}``: the Learner state the workers continue from
        (decentralized: rank 0's, whose optimizer is the one in use) and the
        coordinator's mode and totals."""
        coordinator = self.coordinator.state_dict()
        return {"learner": coordinator.pop("learner"), "grad_workers": coordinator}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` into the driver's Learner and every worker."""
        self.coordinator.load_state_dict({**state["grad_workers"], "learner": state["learner"]})

    def set_seed(self, seed: int) -> int:
        """Reseeds every gradient worker (envs and torch) distinctly from ``seed``."""
        return self.coordinator.set_seed(seed)

    def shutdown(self) -> None:
        """Kills every gradient worker. Idempotent."""
        self.coordinator.shutdown()
