"""GradientWorker: its own collectors and learner copy; computes, applies or all-reduces gradients.

The worker is a plain Python class: :mod:`tdscheme.gradient_workers.pool` wraps it
with ``ray.remote``, and tests or a debugging session run it in-process unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import ray
import torch
from tensordict import TensorDictBase

from tdscheme.gradient_workers.collection import LocalCollection
from tdscheme.gradient_workers.config import GradientWorkerSpec
from tdscheme.learner.factories import build_learner
from tdscheme.rollout.env_config import EnvConfigPush
from tdscheme.runtime import allreduce
from tdscheme.runtime.threads import set_up_actor_process
from tdscheme.transport import Payload, TensorDictCodec

__all__ = ["GradientResult", "GradientWorker"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class GradientResult:
    """What one gradient request returns to the driver.

    Attributes:
        worker_id: the worker that computed it.
        version: learner version of the weights the batch was collected and the
            gradient computed with (for a decentralized step: the version after it).
        frames: valid frames in the batch, the gradient's weight in an average.
        grads: the encoded gradient TensorDict (``None`` from a decentralized step,
            whose gradient never leaves the workers, and when ``nonfinite``).
        metrics: loss terms, ``loss``, ``grad_norm`` (unclipped), ``lr``, as floats.
        episode_returns: returns of the episodes that ended in the batch.
        timings_ms: ``collect_ms``, ``compute_ms``, ``encode_ms``, and for a
            decentralized step ``allreduce_ms`` and ``apply_ms``.
        weights: the loss module's encoded weights after a decentralized step,
            when asked for (the driver mirrors rank 0's); otherwise ``None``.
        nonfinite: what held NaN / inf (the batch, the loss or the gradient norm;
            ``Learner.last_nonfinite``) when the gradient is unusable: it is not
            sent, and a decentralized step gave it weight 0; ``None`` when finite.
    """

    worker_id: int
    version: int
    frames: int
    grads: Payload | None
    metrics: dict[str, float]
    episode_returns: list[float]
    timings_ms: dict[str, float]
    weights: Payload | None = None
    nonfinite: str | None = None


class GradientWorker:
    """Collects with its own torchrl collectors and computes gradients with its own Learner.

    Built from the same picklable factories as the driver's Learner:
    ``modules = spec.policy_factory()``, ``learner = spec.learner_factory(**modules)``;
    its collectors run ``learner.policy``, so every weight update (loaded or
    applied) is what the next batch is collected with.

    Args:
        worker_id: this worker's index (its rank when decentralized).
        spec: factories and batch sizes.
        seed: seeds torch (action sampling) and the envs (collector ``i`` gets
            ``seed + i``); in-process this reseeds torch's global generator.
        weights: initial loss-module weights (a TensorDict or an encoded payload).
        version: the learner version of ``weights``.
        log_level: sets this process's tdscheme, torchrl and Ray loggers to it
            first (:func:`~tdscheme.log_levels.configure_worker_logging`); the
            gradient worker pool passes its driver's level. ``None`` (in-process
            use) leaves logging alone.
        env_config: the env config its envs run from the start (a rebuilt worker's).

    Example:
        >>> import functools
        >>> from tdscheme.presets import get_preset
        >>> from tdscheme.envs import make_env
        >>> cartpole, ppo = functools.partial(make_env, "CartPole-v1"), get_preset("ppo-cartpole")
        >>> spec = GradientWorkerSpec(cartpole, ppo.policy_factory(), ppo.learner_factory(),
        ...                           frames_per_batch=50)
        >>> worker = GradientWorker(0, spec, seed=0)
        >>> result = worker.compute_gradients()
        >>> result.frames, result.version, sorted(result.timings_ms)
        (50, 0, ['collect_ms', 'compute_ms', 'encode_ms'])
        >>> worker.apply_gradients(result.grads)["version"]
        1.0
        >>> worker.shutdown()
    """

    def __init__(
        self,
        worker_id: int,
        spec: GradientWorkerSpec,
        *,
        seed: int | None = None,
        weights: TensorDictBase | Payload | None = None,
        version: int = 0,
        log_level: int | None = None,
        env_config: EnvConfigPush | None = None,
    ) -> None:
        set_up_actor_process(log_level)
        self.worker_id = worker_id
        self.spec = spec
        self._codec = TensorDictCodec(spec.compress)
        if seed is not None:
            torch.manual_seed(seed)
        _, self.learner = build_learner(spec.policy_factory, spec.learner_factory)
        if weights is not None:
            self.set_weights(weights, version)
        self.learner.version = version
        self._collection = LocalCollection(
            spec.env_factory,
            self.learner.policy,
            num_collectors=spec.num_collectors,
            frames_per_collector=spec.frames_per_collector,
            seed=seed,
            collector_kwargs=spec.collector_kwargs,
            collector_class=spec.collector_class,
            env_config=env_config,
        )
        self._last_batch: TensorDictBase | None = None
        self._rank: int | None = None
        self.frames = 0
        self.episodes = 0
        logger.info(
            "gradient worker %d ready: %d collectors of %d frames, seed %s, version %d",
            worker_id, spec.num_collectors, spec.frames_per_collector, seed, version,
        )  # fmt: skip

    # -- centralized: compute here, apply on the driver ---------------------------------

    def compute_gradients(
        self, weights: TensorDictBase | Payload | None = None, version: int | None = None
    ) -> GradientResult:
        """Loads ``weights`` if given, collects one batch and computes its gradient.

        Args:
            weights: loss-module weights to load first (skipped when ``version``
                equals the version this worker already holds).
            version: the learner version of ``weights``.

        Returns:
            The encoded gradient with its frame count, metrics and timings; no
            gradient, and ``nonfinite`` saying why, when it held NaN / inf.

        Raises:
            ValueError: ``weights`` given without ``version``.
        """
        if weights is not None:
            if version is None:
                raise ValueError("compute_gradients: weights given without their version")
            if version != self.learner.version:
                self.set_weights(weights, version)
        start = time.perf_counter()
        batch, returns = self._collect()
        collected = time.perf_counter()
        grads, metrics = self.learner.compute_gradients(batch)
        computed = time.perf_counter()
        payload = None if grads is None else self._codec.encode(grads)
        timings = {
            "collect_ms": 1e3 * (collected - start),
            "compute_ms": 1e3 * (computed - collected),
            "encode_ms": 1e3 * (time.perf_counter() - computed),
        }
        return self._result(metrics, returns, timings, grads=payload)

    def apply_gradients(self, grads: TensorDictBase | Payload) -> dict[str, float]:
        """Takes one optimizer step of this worker's Learner with ``grads``.

        Args:
            grads: a gradient TensorDict or its encoded payload.

        Returns:
            ``grad_norm``, ``lr`` and the new ``version``, as floats.
        """
        if isinstance(grads, Payload):
            grads = self._codec.decode(grads)
        metrics = _floats(self.learner.apply_gradients(grads))
        metrics["version"] = float(self.learner.version)
        return metrics

    def set_seed(self, seed: int) -> int:
        """Reseeds torch and the envs (collector ``i`` gets ``seed + i``) and resets the envs.

        Returns:
            ``seed``.
        """
        torch.manual_seed(seed)
        self._collection.set_seed(seed)
        return seed

    def set_weights(self, weights: TensorDictBase | Payload, version: int) -> int:
        """Loads loss-module weights (as ``Learner.weights()`` returns them) and their version.

        Returns:
            ``version``, the acknowledgement.
        """
        if isinstance(weights, Payload):
            weights = self._codec.decode(weights)
        self.learner.load_weights(weights)
        self.learner.version = int(version)
        return int(version)

    @ray.method(concurrency_group="control")
    def set_env_config(self, push: EnvConfigPush) -> int:
        """Receives an env config while it computes (:meth:`LocalCollection.set_env_config`)."""
        return self._collection.set_env_config(push)

    def weights(self) -> Payload:
        """This worker's loss-module weights, encoded."""
        return self._codec.encode(self.learner.weights())

    def learner_state(self) -> dict[str, Any]:
        """The Learner's full state (weights, optimizer, scheduler, version)."""
        return self.learner.state_dict()

    def load_learner_state(self, state: dict[str, Any]) -> int:
        """Restores :meth:`learner_state`; returns the restored version."""
        self.learner.load_state_dict(state)
        return self.learner.version

    def state(self) -> dict[str, Any]:
        """Small facts about this worker: id, version, frames, episodes, rank."""
        return {
            "worker_id": self.worker_id,
            "version": self.learner.version,
            "frames": self.frames,
            "episodes": self.episodes,
            "rank": self._rank,
        }

    def last_batch(self) -> Payload | None:
        """The batch behind the last gradient, encoded (for tests and debugging)."""
        return None if self._last_batch is None else self._codec.encode(self._last_batch)

    # -- decentralized: all-reduce among the workers ------------------------------------

    def rendezvous_address(self) -> tuple[str, int]:
        """This host's IP address and a free port on it, for rank 0 to host the group."""
        return ray.util.get_node_ip_address(), allreduce.free_port()

    def setup_process_group(
        self,
        rank: int,
        world_size: int,
        master_addr: str,
        master_port: int,
        timeout_s: float = 300.0,
    ) -> int:
        """Joins the gloo group (see :func:`~tdscheme.runtime.allreduce.init_process_group`).

        Leaves a group it is already in first, so a group can be rebuilt after a
        peer died.

        Returns:
            ``rank``.
        """
        self.destroy_process_group()
        allreduce.init_process_group(
            rank=rank, world_size=world_size, master_addr=master_addr, master_port=master_port,
            timeout_s=timeout_s,
        )  # fmt: skip
        self._rank = rank
        return rank

    def destroy_process_group(self) -> None:
        """Leaves the gloo group, if in one. Idempotent."""
        allreduce.destroy_process_group()
        self._rank = None

    def step_allreduce(self, return_weights: bool = False) -> GradientResult:
        """Collects, computes a gradient, all-reduces it (weighted by frames), applies it.

        Every rank must call this for the all-reduce to complete. A rank whose
        gradient held NaN / inf contributes zeros with weight 0, so the others'
        mean is applied; when every rank's did, the all-reduced weight is 0 and
        every rank skips the update (same bits, same decision: the weights stay
        identical).

        Args:
            return_weights: put this worker's encoded weights after the update in
                the result (the driver asks rank 0, to mirror them).

        Returns:
            The result of this step (``grads`` is ``None``; ``frames`` are this
            worker's own; ``version`` is the version after the update;
            ``nonfinite`` set when this worker's gradient was left out).

        Raises:
            RuntimeError: not in a process group, a peer died, or the all-reduce
                timed out.
        """
        if self._rank is None:
            raise RuntimeError(
                f"gradient worker {self.worker_id}: step_allreduce needs setup_process_group()"
            )
        start = time.perf_counter()
        batch, returns = self._collect()
        collected = time.perf_counter()
        grads, metrics = self.learner.compute_gradients(batch)
        computed = time.perf_counter()
        weight = 0.0 if grads is None else float(metrics["num_frames"])
        grads = self.learner.zero_gradients() if grads is None else grads
        mean, _ = allreduce.weighted_allreduce_mean(grads, weight)
        reduced = time.perf_counter()
        applied = {} if mean is None else _floats(self.learner.apply_gradients(mean))
        done = time.perf_counter()
        timings = {
            "collect_ms": 1e3 * (collected - start),
            "compute_ms": 1e3 * (computed - collected),
            "allreduce_ms": 1e3 * (reduced - computed),
            "apply_ms": 1e3 * (done - reduced),
        }
        result = self._result(metrics, returns, timings, grads=None)
        if "grad_norm" in applied:  # absent when no rank had a finite gradient
            result.metrics["applied_grad_norm"] = applied["grad_norm"]
        if return_weights:
            result.weights = self.weights()
        return result

    # -- lifecycle ------------------------------------------------------------------------

    @ray.method(concurrency_group="control")
    def ping(self) -> int:
        """Liveness check answered even while computing; returns the worker id."""
        return self.worker_id

    @ray.method(concurrency_group="control")
    def progress(self) -> int:
        """Env steps its collectors took so far (frames), answered even while computing."""
        return self._collection.progress()

    def shutdown(self) -> None:
        """Leaves the process group and shuts the collectors down. Idempotent."""
        self.destroy_process_group()
        self._collection.shutdown()
        self._last_batch = None

    # -- internals ------------------------------------------------------------------------

    def _collect(self) -> tuple[TensorDictBase, list[float]]:
        batch, returns = self._collection.collect()
        self._last_batch = batch
        self.episodes += len(returns)
        return batch, returns

    def _result(
        self,
        metrics: TensorDictBase,
        returns: list[float],
        timings: dict[str, float],
        *,
        grads: Payload | None,
    ) -> GradientResult:
        values = _floats(metrics)
        frames = int(values.pop("num_frames"))
        self.frames += frames
        return GradientResult(
            worker_id=self.worker_id,
            version=self.learner.version,
            frames=frames,
            grads=grads,
            metrics=values,
            episode_returns=returns,
            timings_ms=timings,
            nonfinite=self.learner.last_nonfinite,
        )


def _floats(metrics: TensorDictBase) -> dict[str, float]:
    return {
        key if isinstance(key, str) else ".".join(key): float(value)
        for key, value in metrics.items(include_nested=True, leaves_only=True)
    }
