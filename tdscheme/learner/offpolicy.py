"""OffPolicyLearner: gradient steps on replay-buffer samples, target networks, priorities.

A :class:`~tdscheme.learner.Learner` for torchrl's off-policy losses (``DQNLoss``,
``SACLoss``, ``TD3Loss``, ``DDPGLoss``): :meth:`OffPolicyLearner.replay_update`
samples one minibatch from a torchrl replay buffer, takes one optimizer step, steps
the target networks (torchrl's ``SoftUpdate`` / ``HardUpdate``) and, with a
``PrioritizedSampler``, writes the loss's ``td_error`` back as the sampled frames'
priorities (``buffer.update_tensordict_priority``). The collection policy's
exploration modules (``EGreedyModule``, ``AdditiveGaussianModule``, ...) anneal with
the frames collected (:meth:`OffPolicyLearner.anneal_exploration_`); their state
(epsilon, sigma) is a buffer of the policy, so it travels with the policy's weights
and is kept in :meth:`OffPolicyLearner.state_dict`, with the target updater's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.data import PrioritizedSampler
from torchrl.objectives import LossModule
from torchrl.objectives.utils import TargetNetUpdater

from tdscheme.keys import POLICY_VERSION_KEY
from tdscheme.learner.config import LearnerConfig
from tdscheme.learner.learner import Learner, OptimizerFactory, SchedulerFactory
from tdscheme.learner.nonfinite import SkippedStep, batch_source
from tdscheme.learner.snapshots import to_cpu
from tdscheme.learner.steps import metrics_td
from tdscheme.learner.target_nets import load_updater_state, updater_state

__all__ = [
    "OffPolicyLearner",
    "is_prioritized",
    "lag_metrics",
    "sample_frames",
    "write_priorities_",
]

#: the key of the sampled frames' storage indices in torchrl's TensorDict buffers
INDEX_KEY = "index"


def is_prioritized(buffer: Any) -> bool:
    """Whether ``buffer`` (a torchrl replay buffer, local or Ray-held) samples by priority.

    A Ray-held buffer's sampler lives in its actor: a
    :class:`~tdscheme.replay.BoundedRayBuffer` around it says (its ``prioritized``).
    """
    prioritized = getattr(buffer, "prioritized", None)
    if isinstance(prioritized, bool):
        return prioritized
    try:
        sampler = buffer.sampler
    except (AttributeError, NotImplementedError):
        sampler = getattr(buffer, "_sampler", None)
    return isinstance(sampler, PrioritizedSampler)


def sample_frames(buffer: Any, batch_size: int | None = None) -> TensorDictBase:
    """One sample of ``buffer`` (of its own batch size, or ``batch_size`` frames), flat.

    Raises:
        TypeError: the sample is not a TensorDict.
    """
    sample = buffer.sample() if batch_size is None else buffer.sample(batch_size)
    if not isinstance(sample, TensorDictBase):
        raise TypeError(
            f"buffer.sample() returned {type(sample).__name__}; accepted: a buffer of "
            f"TensorDicts (TensorDictReplayBuffer, RayReplayBuffer of a LazyTensorStorage)"
        )
    return sample if sample.batch_dims == 1 else sample.reshape(-1)


def write_priorities_(
    loss_module: LossModule, buffer: Any, sample: TensorDictBase, batch: TensorDictBase
) -> None:
    """Writes the loss's ``td_error`` of ``batch`` back as the priorities of ``sample``'s frames.

    Raises:
        ValueError: the sample has no ``index`` or the loss wrote no priority.
    """
    key = getattr(getattr(loss_module, "tensor_keys", None), "priority", "td_error")
    priority = batch.get(key, None)
    if priority is None or INDEX_KEY not in sample.keys():
        raise ValueError(
            f"write_priorities=True but the sample has {'no ' + INDEX_KEY!r} "
            f"or {type(loss_module).__name__} wrote no {key!r}; accepted: a "
            f"TensorDictReplayBuffer with a PrioritizedSampler and a loss that writes "
            f"its td_error"
        )
    if batch is not sample:
        sample.set(key, priority.detach().to(sample.device))
    buffer.update_tensordict_priority(sample)


def lag_metrics(
    sample: TensorDictBase, newest_policy_version: int | None
) -> dict[str, torch.Tensor]:
    """``policy_lag_mean`` / ``policy_lag_max`` of the sampled frames (empty without versions)."""
    versions = sample.get(POLICY_VERSION_KEY, None)
    if newest_policy_version is None or versions is None:
        return {}
    lag = (newest_policy_version - versions).clamp_min(0).float()
    return {"policy_lag_mean": lag.mean(), "policy_lag_max": lag.max()}


class OffPolicyLearner(Learner):
    """A Learner that trains an off-policy torchrl loss on replay-buffer samples.

    Every optimizer step (:meth:`replay_update`, :meth:`update`,
    :meth:`apply_gradients`) is followed by one ``target_updater.step()``.

    Args:
        loss_module: an off-policy torchrl loss with target networks.
        target_updater: torchrl's ``SoftUpdate`` / ``HardUpdate`` over
            ``loss_module``, or a function building one from the loss module
            (e.g. ``functools.partial(make_target_updater, kind="hard")``);
            ``None``: no target updates (a loss without target networks).
        config: as for :class:`Learner`; ``num_epochs`` and ``minibatch_size``
            apply only to :meth:`update` (a replay update is one step on one sample).
        optimizer: as for :class:`Learner`.
        lr_scheduler: as for :class:`Learner` (steps once per optimizer step).
        policy: the module the collectors run, e.g. the Q-value actor followed by
            an ``EGreedyModule``; by default the loss's actor (or value network).

    A loss without a value estimator gets torchrl's default one here (call
    ``loss.make_value_estimator(gamma=...)`` before to choose it).

    Raises:
        TypeError: as for :class:`Learner`, or ``target_updater`` is not an updater.
        ValueError: as for :class:`Learner`.

    Example:
        >>> import functools
        >>> import torch
        >>> from tensordict.nn import TensorDictSequential
        >>> from torchrl.data import LazyTensorStorage, OneHot, TensorDictReplayBuffer
        >>> from torchrl.modules import MLP, EGreedyModule, QValueActor
        >>> from torchrl.objectives import DQNLoss
        >>> from tdscheme.learner.target_nets import make_target_updater
        >>> qnet = QValueActor(MLP(in_features=3, out_features=2, num_cells=[8]),
        ...                    in_keys=["observation"], spec=OneHot(2))
        >>> policy = TensorDictSequential(qnet, EGreedyModule(OneHot(2), annealing_num_steps=100))
        >>> learner = OffPolicyLearner(
        ...     DQNLoss(qnet, action_space="one-hot", delay_value=True),
        ...     target_updater=functools.partial(make_target_updater, kind="hard",
        ...                                      hard_update_interval=10),
        ...     policy=policy)
        >>> buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
        >>> frames = policy(TensorDict(observation=torch.randn(8, 3), batch_size=[8]))
        >>> frames["next"] = TensorDict(observation=torch.randn(8, 3), reward=torch.ones(8, 1),
        ...     done=torch.zeros(8, 1, dtype=torch.bool),
        ...     terminated=torch.zeros(8, 1, dtype=torch.bool), batch_size=[8])
        >>> _ = buffer.extend(frames)
        >>> metrics = learner.replay_update(buffer)
        >>> learner.version, int(metrics["num_frames"]), learner.state_dict()["target_updater"]
        (1, 4, {'kind': 'hard', 'counter': 1})
        >>> learner.anneal_exploration_(50)
        >>> round(float(policy[1].eps), 3)
        0.55
    """

    def __init__(
        self,
        loss_module: LossModule,
        *,
        target_updater: TargetNetUpdater | Callable[[LossModule], TargetNetUpdater] | None = None,
        config: LearnerConfig | None = None,
        optimizer: torch.optim.Optimizer | OptimizerFactory | None = None,
        lr_scheduler: SchedulerFactory | None = None,
        policy: nn.Module | None = None,
    ) -> None:
        if isinstance(loss_module, LossModule) and loss_module._value_estimator is None:
            # torchrl builds it lazily at the first call, and a state saved after that
            # one would not load into a fresh Learner; build torchrl's default now
            loss_module.make_value_estimator()
        super().__init__(
            loss_module,
            config=config,
            optimizer=optimizer,
            lr_scheduler=lr_scheduler,
            policy=policy,
        )
        if target_updater is not None and not isinstance(target_updater, TargetNetUpdater):
            if not callable(target_updater):
                raise TypeError(
                    f"target_updater={target_updater!r} is invalid; accepted: torchrl's "
                    f"SoftUpdate/HardUpdate, a function loss_module -> updater, or None"
                )
            target_updater = target_updater(self.loss_module)
            if not isinstance(target_updater, TargetNetUpdater):
                raise TypeError(
                    f"target_updater factory returned {type(target_updater).__name__}; "
                    f"accepted: torchrl's SoftUpdate or HardUpdate"
                )
        self.target_updater = target_updater
        self.exploration_modules = [m for m in self.policy.modules() if _anneals(m)]

    # -- training ---------------------------------------------------------------------

    def replay_update(
        self,
        buffer: Any,
        *,
        write_priorities: bool | None = None,
        newest_policy_version: int | None = None,
    ) -> TensorDict:
        """One optimizer step on one sample of ``buffer``, then the target update.

        Args:
            buffer: a torchrl replay buffer (local or Ray-held) whose ``sample()``
                returns a TensorDict minibatch (its ``batch_size`` frames).
            write_priorities: write the loss's ``td_error`` back into the buffer
                (``None``: when the buffer has a ``PrioritizedSampler``).
            newest_policy_version: the newest weights the collectors were sent;
                with it, ``policy_lag_mean`` / ``policy_lag_max`` of the sampled
                frames (by their ``("collector", "policy_version")``) are reported.

        Returns:
            Detached float scalars on CPU: the loss terms, ``loss``, ``grad_norm``,
            ``lr``, ``num_frames`` (frames in the sample), ``sample_ms`` and
            ``priority_ms`` (time spent writing priorities back, 0 without); and
            ``nonfinite_skipped`` (1 when NaN / inf in the sample, the loss or the
            gradient skipped this step: no step, no target update, no new version),
            ``nonfinite_skipped_total`` and ``nonfinite_frames_dropped`` (0 here),
            as :meth:`~tdscheme.learner.Learner.update` reports them.

        Raises:
            TypeError: the sample is not a TensorDict.
            tdscheme.errors.NonFiniteUpdateError:
                ``config.max_nonfinite_updates`` steps in a row were skipped.
            ValueError: priorities are to be written and the sample has no ``index``
                or the loss wrote no priority.
        """
        start = time.perf_counter()
        sample = sample_frames(buffer)
        sampled = time.perf_counter()
        batch = sample.to(self.device)
        lr = self._lr()
        try:  # NaN / inf in the sample, the loss or the gradient: no step, counted (as update)
            problem = self._nonfinite.check_batch(batch)
            if problem is not None:
                raise SkippedStep(problem)
            metrics = self._optimizer_step(batch)
        except SkippedStep as skip:
            self._nonfinite.skipped(str(skip), source=batch_source(batch))
            skipped = self._nonfinite.metrics(skipped=True, dropped=0)
            return metrics_td(skipped, lr=lr, num_frames=sample.shape[0])
        self._nonfinite.succeeded()
        self._finish_update()
        metrics.update(self._nonfinite.metrics(skipped=False, dropped=0))
        if write_priorities is None:
            write_priorities = is_prioritized(buffer)
        written = time.perf_counter()
        if write_priorities:
            write_priorities_(self.loss_module, buffer, sample, batch)
        metrics.update(lag_metrics(sample, newest_policy_version))
        metrics["sample_ms"] = torch.tensor(1e3 * (sampled - start))
        metrics["priority_ms"] = torch.tensor(1e3 * (time.perf_counter() - written))
        return metrics_td(metrics, lr=lr, num_frames=sample.shape[0])

    def replay_updates(self, buffer: Any, num_updates: int, **kwargs: Any) -> list[TensorDict]:
        """``num_updates`` :meth:`replay_update` calls, their metrics in order.

        A :class:`~tdscheme.learner.LearnerGroup` answers the same call with one
        round trip to its ranks, which is why the training loop asks for a step's
        updates at once.
        """
        return [self.replay_update(buffer, **kwargs) for _ in range(num_updates)]

    def anneal_exploration_(self, frames: int) -> None:
        """Anneals the policy's exploration modules (epsilon, noise) by ``frames`` frames.

        Args:
            frames: frames collected since the last call (torchrl's
                ``EGreedyModule.step(frames)`` / ``AdditiveGaussianModule.step(frames)``).
        """
        if frames > 0:
            for module in self.exploration_modules:
                module.step(frames)

    def _finish_update(self) -> None:
        super()._finish_update()
        if self.target_updater is not None:
            self.target_updater.step()

    # -- state --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """:meth:`Learner.state_dict` plus ``target_updater`` and ``exploration`` states.

        The target networks are in ``loss_module`` (torchrl keeps them there).
        """
        state = super().state_dict()
        state["target_updater"] = updater_state(self.target_updater)
        state["exploration"] = self.exploration_state()
        return state

    def exploration_state(self) -> list[dict[str, Any]]:
        """CPU copies of the exploration modules' states (epsilon, noise), in policy order."""
        return [to_cpu(dict(m.state_dict())) for m in self.exploration_modules]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` in place.

        Raises:
            ValueError: as :meth:`Learner.load_state_dict`, or the target updater or
                exploration modules differ from this Learner's.
        """
        super().load_state_dict(state)
        load_updater_state(self.target_updater, state.get("target_updater"))
        exploration = state.get("exploration") or []
        if len(exploration) != len(self.exploration_modules):
            raise ValueError(
                f"state['exploration'] has {len(exploration)} module states but this "
                f"Learner's policy has {len(self.exploration_modules)} exploration modules; "
                f"build both alike"
            )
        for module, module_state in zip(self.exploration_modules, exploration, strict=True):
            module.load_state_dict(module_state)


def _anneals(module: nn.Module) -> bool:
    """torchrl's annealed exploration modules: a ``step(frames)`` and an annealing schedule."""
    return callable(getattr(module, "step", None)) and hasattr(module, "annealing_num_steps")
