"""The Learner: a torchrl ``LossModule`` with its optimizer, value estimator and version count.

The Learner is Ray-free and pickles (with ``pickle`` or ``cloudpickle``), so the same
object trains in-process, inside a Ray actor, or as a gradient worker that only
computes gradients (:meth:`Learner.compute_gradients`) for another Learner to apply
(:meth:`Learner.apply_gradients`).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torch.optim import Optimizer
from torchrl.objectives import LossModule

from tdscheme.learner.batches import minibatches, prepare_batch
from tdscheme.learner.config import LearnerConfig
from tdscheme.learner.construction import (
    OptimizerFactory,
    SchedulerFactory,
    ValueEstimator,
    available_device,
    build_optimizer,
    build_scheduler,
    check_value_estimator,
    resolve_policy,
    trainable_parameters,
)
from tdscheme.learner.gradients import (
    assign_gradients_,
    gradients_from_parameters,
    parameter_key,
)
from tdscheme.learner.nonfinite import NonFiniteGuard, SkippedStep, batch_source
from tdscheme.learner.snapshots import (
    cpu_weights,
    load_training_state_,
    load_weights_,
    training_state,
)
from tdscheme.learner.steps import (
    backward,
    clip_and_step_,
    metrics_td,
    total_grad_norm,
    zero_grad_,
)

__all__ = ["Learner"]

logger = logging.getLogger(__name__)


class Learner:
    """Trains a torchrl ``LossModule`` on batches and counts its versions.

    The loss module is used unchanged (``ClipPPOLoss``, ``A2CLoss``, ...). Each
    :meth:`update` runs the value estimator over the batch as collected (GAE needs
    the time dimension, the last batch dimension), drops the frames that
    ``("collector", "mask")`` marks invalid, flattens the batch and takes
    ``num_epochs`` passes of minibatch optimizer steps over it. The input batch is
    never modified.

    Args:
        loss_module: the torchrl loss to minimise; its ``loss_*`` outputs are summed.
        config: epochs, minibatches, clipping, learning rate and device
            (``LearnerConfig()`` when ``None``).
        optimizer: an optimizer over the loss module's parameters, or a factory
            called with them; ``None`` builds ``torch.optim.Adam(lr=config.lr)``.
            Pass a factory when the Learner moves the loss to another device.
        value_estimator: applied to each batch without gradients before training,
            e.g. ``GAE(gamma=0.99, lmbda=0.95, value_network=critic)``.
        lr_scheduler: a factory called with the optimizer; the scheduler steps once
            per :meth:`update` or :meth:`apply_gradients`.
        policy: the module whose weights :meth:`policy_weights` returns; by default
            the loss module's ``actor_network`` (or ``actor``, or ``value_network``
            for value-based losses). It must share parameters with the loss module.

    Raises:
        TypeError: ``loss_module`` is not a torchrl ``LossModule``, or another
            argument has the wrong type.
        ValueError: the loss has no trainable parameters, the device is not
            available, or no policy can be found or it shares no parameter.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator
        >>> from torchrl.objectives import A2CLoss
        >>> from torchrl.objectives.value import GAE
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        ...     in_keys=["logits"], distribution_class=OneHotCategorical, return_log_prob=True)
        >>> critic = ValueOperator(torch.nn.Linear(3, 1), in_keys=["observation"])
        >>> learner = Learner(
        ...     A2CLoss(actor, critic),
        ...     config=LearnerConfig(num_epochs=2, minibatch_size=4),
        ...     value_estimator=GAE(gamma=0.99, lmbda=0.95, value_network=critic))
        >>> batch = actor(TensorDict(observation=torch.randn(8, 3), batch_size=[8]))
        >>> batch["next"] = TensorDict(
        ...     observation=torch.randn(8, 3), reward=torch.ones(8, 1),
        ...     done=torch.zeros(8, 1, dtype=torch.bool),
        ...     terminated=torch.zeros(8, 1, dtype=torch.bool), batch_size=[8])
        >>> metrics = learner.update(batch)
        >>> learner.version, int(metrics["num_frames"]), bool(metrics["loss"].isfinite())
        (1, 8, True)
        >>> sorted(learner.policy_weights().keys(include_nested=True, leaves_only=True))
        [('module', '0', 'module', 'bias'), ('module', '0', 'module', 'weight')]
    """

    def __init__(
        self,
        loss_module: LossModule,
        *,
        config: LearnerConfig | None = None,
        optimizer: Optimizer | OptimizerFactory | None = None,
        value_estimator: ValueEstimator | None = None,
        lr_scheduler: SchedulerFactory | None = None,
        policy: nn.Module | None = None,
    ) -> None:
        self._params = trainable_parameters(loss_module)
        self.config = LearnerConfig() if config is None else config
        if not isinstance(self.config, LearnerConfig):
            raise TypeError(
                f"config must be a LearnerConfig or None, got {type(self.config).__name__}"
            )
        self.device = available_device(self.config.device)
        self.loss_module = loss_module.to(self.device)
        self.value_estimator = check_value_estimator(value_estimator, self._params, self.device)
        self.policy = resolve_policy(policy, self.loss_module, self._params)
        self.optimizer = build_optimizer(optimizer, self._params, self.config.lr)
        self.lr_scheduler = build_scheduler(lr_scheduler, self.optimizer)
        self.version = 0
        #: what made the last :meth:`compute_gradients` non-finite (``None``: it was finite)
        self.last_nonfinite: str | None = None
        self._nonfinite = NonFiniteGuard(
            max_in_a_row=self.config.max_nonfinite_updates,
            drop_frames=self.config.drop_nonfinite_frames,
        )

    # -- training -----------------------------------------------------------------

    def update(self, batch: TensorDictBase) -> TensorDict:
        """Trains on one batch: value estimator, ``num_epochs`` of minibatch steps.

        Args:
            batch: frames shaped ``[T]``, ``[N, T]`` or ``[W, N, T]`` (time last), as
                torchrl collectors produce them; ``("collector", "mask")`` may mark
                padded frames, which are dropped after the value estimator.

        Returns:
            Detached float scalars on CPU: the mean over optimizer steps of every
            scalar the loss returns (``loss_objective``, ``loss_critic``,
            ``entropy``, ...), ``loss`` (the sum of the ``loss_*`` terms),
            ``grad_norm`` (total norm before clipping), ``lr`` (the learning rate
            the steps used) and ``num_frames`` (valid frames in the batch); and
            ``nonfinite_skipped`` (1 when NaN / inf in the batch, a loss or a
            gradient skipped this update: no step with it, no new version, only
            ``lr`` and ``num_frames`` besides), ``nonfinite_skipped_total`` and
            ``nonfinite_frames_dropped`` (see :mod:`tdscheme.learner.nonfinite`).

        Raises:
            TypeError: ``batch`` is not a TensorDict.
            ValueError: ``batch`` has no batch dimension or no valid frame.
            tdscheme.errors.NonFiniteUpdateError:
                ``config.max_nonfinite_updates`` updates in a row were skipped.
        """
        dropped = 0
        if self.config.drop_nonfinite_frames:
            batch, dropped = self._nonfinite.drop_frames(batch)
        flat = self._prepare(batch)
        lr = self._lr()
        steps = []
        try:
            problem = self._nonfinite.check_batch(flat)
            if problem is not None:
                raise SkippedStep(problem)
            for _ in range(self.config.num_epochs):
                for minibatch in minibatches(
                    flat, size=self.config.minibatch_size, shuffle=self.config.shuffle
                ):
                    steps.append(self._optimizer_step(minibatch))
        except SkippedStep as skip:  # NaN / inf: no step with it, no new version
            self._nonfinite.skipped(str(skip), source=batch_source(flat))
            skipped = self._nonfinite.metrics(skipped=True, dropped=dropped)
            return metrics_td(skipped, lr=lr, num_frames=flat.shape[0])
        self._nonfinite.succeeded()
        self._finish_update()
        metrics = {key: torch.stack([s[key] for s in steps]).mean() for key in steps[0]}
        metrics.update(self._nonfinite.metrics(skipped=False, dropped=dropped))
        return metrics_td(metrics, lr=lr, num_frames=flat.shape[0])

    def compute_gradients(self, batch: TensorDictBase) -> tuple[TensorDict | None, TensorDict]:
        """One backward pass over the whole batch, without an optimizer step.

        ``compute_gradients`` followed by :meth:`apply_gradients` gives the same
        parameters as :meth:`update` with one epoch, one unshuffled minibatch. The
        batch, loss and gradient norm are checked for NaN / inf as in :meth:`update`
        (``drop_nonfinite_frames`` applies too); a non-finite one gives no gradient,
        and nothing is counted toward ``max_nonfinite_updates``: whoever applies
        gradients decides (the gradient-worker coordinators count per worker).

        Args:
            batch: as for :meth:`update`; the value estimator runs first.

        Returns:
            ``(grads, metrics)``. ``grads`` holds one detached CPU tensor per
            trainable parameter, keyed like ``TensorDict.from_module(loss_module)``
            (zeros where a parameter got no gradient); it is ``None`` when NaN / inf
            was found, and :attr:`last_nonfinite` then says where. ``metrics`` holds
            the loss terms, ``loss``, ``grad_norm`` (unclipped), ``lr`` and
            ``num_frames`` (the weight to give ``grads`` in :func:`average_gradients`),
            only the last two without ``grads``, and ``nonfinite_frames_dropped``
            with ``drop_nonfinite_frames``.

        Raises:
            TypeError: ``batch`` is not a TensorDict.
            ValueError: ``batch`` has no batch dimension or no valid frame.
        """
        extra: dict[str, torch.Tensor] = {}
        if self.config.drop_nonfinite_frames:
            batch, dropped = self._nonfinite.drop_frames(batch)
            extra["nonfinite_frames_dropped"] = torch.tensor(float(dropped))
        flat = self._prepare(batch)
        metrics: dict[str, torch.Tensor] = {}
        grads: TensorDict | None = None
        self.last_nonfinite = self._nonfinite.check_batch(flat)
        if self.last_nonfinite is None:
            zero_grad_(self._params)
            metrics = backward(self.loss_module, flat)
            metrics["grad_norm"] = total_grad_norm(self._params, device=self.device)
            try:
                self._nonfinite.check_step(
                    {"loss": metrics["loss"], "grad_norm": metrics["grad_norm"]}
                )
                grads = gradients_from_parameters(self._params)
            except SkippedStep as skip:
                self.last_nonfinite, metrics = str(skip), {}
            zero_grad_(self._params)
        return grads, metrics_td({**metrics, **extra}, lr=self._lr(), num_frames=flat.shape[0])

    def zero_gradients(self) -> TensorDict:
        """Zeros shaped like :meth:`compute_gradients`' ``grads`` (a no-op contribution to a sum)."""
        zeros = {
            parameter_key(n): torch.zeros(p.shape, dtype=p.dtype) for n, p in self._params.items()
        }
        return TensorDict(zeros, batch_size=[])

    def apply_gradients(self, grads: TensorDictBase) -> TensorDict:
        """Takes one optimizer step with the given gradients.

        Args:
            grads: a gradient TensorDict as :meth:`compute_gradients` returns (or
                :func:`average_gradients` of several); it is not modified.

        Returns:
            ``grad_norm`` (before clipping) and ``lr`` (of this step), detached
            float scalars on CPU.

        Raises:
            TypeError: ``grads`` is not a TensorDict.
            ValueError: ``grads`` misses a trainable parameter, has unknown entries
                or wrong shapes.
        """
        lr = self._lr()
        assign_gradients_(self._params, grads)
        try:
            grad_norm = self._clip_and_step()
        except SkippedStep as skip:  # NaN / inf gradients: no step, no new version
            self._nonfinite.skipped(str(skip), source=" (in the gradients given)")
            return metrics_td(self._nonfinite.metrics(skipped=True, dropped=0), lr=lr)
        self._nonfinite.succeeded()
        self._finish_update()
        return metrics_td({"grad_norm": grad_norm}, lr=lr)

    # -- weights and state ---------------------------------------------------------

    def policy_weights(self) -> TensorDict:
        """A CPU copy of the policy's parameters and buffers, safe to send.

        Returns:
            ``TensorDict.from_module(policy)`` detached and copied to CPU; a
            collector loads it with ``weights.to_module(policy)``.
        """
        return cpu_weights(self.policy)

    def weights(self) -> TensorDict:
        """A CPU copy of every parameter and buffer of the loss module.

        Returns:
            ``TensorDict.from_module(loss_module)`` detached and copied to CPU, for
            :meth:`load_weights` on another Learner (e.g. a gradient worker).
        """
        return cpu_weights(self.loss_module)

    def load_weights(self, weights: TensorDictBase) -> None:
        """Copies ``weights`` (from :meth:`weights`) into the loss module, in place.

        The optimizer state and version are left as they are.

        Args:
            weights: a TensorDict with exactly the keys of :meth:`weights`.

        Raises:
            TypeError: ``weights`` is not a TensorDict.
            ValueError: keys differ from the loss module's parameters and buffers.
        """
        load_weights_(self.loss_module, weights)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: loss module, optimizer, scheduler, version.

        Returns:
            Plain dicts of CPU tensors, numbers and lists, a snapshot that
            ``torch.save`` writes and ``torch.load(weights_only=True)`` reads.
        """
        return training_state(
            self.loss_module, self.optimizer, self.lr_scheduler, version=self.version
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned, in place.

        Args:
            state: a dict from :meth:`state_dict` of a Learner built the same way.

        Raises:
            ValueError: keys are missing, or the state has a scheduler state and
                this Learner has no scheduler (or the other way round).
        """
        self.version = load_training_state_(
            state,
            loss_module=self.loss_module,
            optimizer=self.optimizer,
            lr_scheduler=self.lr_scheduler,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(loss_module={type(self.loss_module).__name__}, "
            f"version={self.version}, config={self.config})"
        )

    # -- internals -----------------------------------------------------------------

    def _prepare(self, batch: TensorDictBase) -> TensorDictBase:
        return prepare_batch(batch, value_estimator=self.value_estimator, device=self.device)

    def _optimizer_step(self, minibatch: TensorDictBase) -> dict[str, torch.Tensor]:
        zero_grad_(self._params)
        metrics = backward(self.loss_module, minibatch)
        self._nonfinite.check_step({"loss": metrics["loss"]})
        metrics["grad_norm"] = self._clip_and_step()
        return metrics

    def _clip_and_step(self) -> torch.Tensor:
        return clip_and_step_(
            self._params,
            self.optimizer,
            max_grad_norm=self.config.max_grad_norm,
            device=self.device,
        )

    def _finish_update(self) -> None:
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.version += 1

    def _lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])
