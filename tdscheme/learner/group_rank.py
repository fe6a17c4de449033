"""LearnerRank: one rank of a learner group, inside its Ray actor (never imported by the driver's code paths).

A plain Python class: :mod:`tdscheme.learner.group` wraps it with ``ray.remote``;
tests run it in-process unchanged. It builds its Learner from the same picklable
factories as the driver's, loads the group's state, joins the gloo group and
trains on its shard of each batch (:func:`~tdscheme.learner.data_parallel.data_parallel_update`).
Before each update it keeps a copy of its state, so that a group whose peer died
mid-update restarts from the weights and optimizer state it had before it.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray
import torch
from tensordict import TensorDict, TensorDictBase

from tdscheme.learner.data_parallel import (
    check_group_loss,
    data_parallel_replay_step,
    data_parallel_update,
    reduce_replay_metrics,
)
from tdscheme.learner.factories import build_learner
from tdscheme.learner.learner import Learner
from tdscheme.learner.offpolicy import lag_metrics, sample_frames, write_priorities_
from tdscheme.learner.steps import metrics_td
from tdscheme.runtime import allreduce
from tdscheme.runtime.threads import set_up_actor_process
from tdscheme.transport import Payload, decode_tensordict, encode_tensordict

__all__ = ["LearnerRank", "LearnerRankSpec", "RankResult"]


@dataclasses.dataclass(frozen=True)
class LearnerRankSpec:
    """What every rank is built from.

    Attributes:
        policy_factory: builds the modules (an ``nn.Module`` or a dict with ``"actor"``).
        learner_factory: builds the Learner from them (``learner_factory(**modules)``).
        seed: seeds the minibatch order, alike on every rank.
        num_threads: torch threads of the rank (its CPUs); ``None``: left as they are.
    """

    policy_factory: Callable[[], Any]
    learner_factory: Callable[..., Learner]
    seed: int = 0
    num_threads: int | None = None


@dataclasses.dataclass
class RankResult:
    """What one rank's update returns: the group's metrics, its version, rank 0's weights.

    ``metrics``: one TensorDict for an update on a batch, a list (one per step) for
    replay updates.

    ``weights`` is the encoded (:mod:`tdscheme.transport`) loss-module weights, when asked.
    """

    metrics: TensorDict | list[TensorDict]
    version: int
    weights: Payload | None = None


class LearnerRank:
    """One learner rank: a Learner, a minibatch generator and a place in the gloo group.

    Args:
        worker_id: this rank's index.
        spec: the factories and seed.
        seed: torch's seed in this process (the pool gives each rank its own).
        log_level: the driver's log level (``None`` in-process: logging untouched).
        state: the Learner state to start from (``Learner.state_dict()``).
    """

    def __init__(
        self,
        worker_id: int,
        spec: LearnerRankSpec,
        *,
        seed: int | None = None,
        log_level: int | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        set_up_actor_process(log_level)
        if seed is not None:
            torch.manual_seed(seed)
        if spec.num_threads is not None:  # Ray's workers import torch before any OMP setting
            torch.set_num_threads(spec.num_threads)
        self.worker_id = worker_id
        self.spec = spec
        _, self.learner = build_learner(spec.policy_factory, spec.learner_factory)
        check_group_loss(self.learner.loss_module)
        self.generator = torch.Generator()
        self._before: dict[str, Any] | None = None
        self._buffer: Any = None
        self._share = 0
        self.load_state_dict(self.learner.state_dict() if state is None else state)

    def ping(self) -> int:
        """Answers once built (the pool's readiness and liveness check)."""
        return self.worker_id

    def rendezvous_address(self) -> tuple[str, int]:
        """This node's IP address and a port free on it (asked of rank 0)."""
        return ray.util.get_node_ip_address(), allreduce.free_port()

    def setup_process_group(
        self, rank: int, world_size: int, master_addr: str, master_port: int, timeout_s: float
    ) -> int:
        """Leaves any group it is in, then joins the new one (see :func:`allreduce.init_process_group`)."""
        allreduce.destroy_process_group()
        allreduce.init_process_group(
            rank=rank, world_size=world_size, master_addr=master_addr, master_port=master_port,
            timeout_s=timeout_s,
        )  # fmt: skip
        return rank

    def update(self, shard: TensorDictBase | Payload, return_weights: bool) -> RankResult:
        """Trains on this rank's shard, together with the other ranks.

        Args:
            shard: this rank's env rows of the batch (encoded: zero-copy through Ray).
            return_weights: add the loss module's weights (rank 0: for the driver's mirror).
        """
        if isinstance(shard, Payload):
            shard = decode_tensordict(shard)
        self._keep_state()
        metrics = data_parallel_update(self.learner, shard, self.generator)
        weights = encode_tensordict(self.learner.weights()) if return_weights else None
        return RankResult(metrics=metrics, version=self.learner.version, weights=weights)

    def attach_buffer(self, client: Any, share: int) -> None:
        """Samples ``share`` frames per replay update through ``client``.

        Args:
            client: a client of the Ray-held buffer (the driver's ``buffer.client()``:
                tdscheme's ``BoundedRayBuffer`` gives one whose calls are bounded).
            share: this rank's frames of each minibatch.
        """
        self._buffer = client
        self._share = share

    def replay_updates(
        self,
        num_updates: int,
        write_priorities: bool,
        newest_policy_version: int | None,
        return_weights: bool,
    ) -> RankResult:
        """``num_updates`` replay steps together with the other ranks, each on a sample of
        this rank's share (:meth:`attach_buffer`); the group's metrics of each, in order.

        Args:
            write_priorities: write this rank's frames' ``td_error`` back (prioritized buffers).
            newest_policy_version: the newest weights the collectors were sent (policy lag).
            return_weights: add the loss module's weights (rank 0: for the driver's mirror).
        """
        if self._buffer is None:
            raise RuntimeError("replay_updates() before attach_buffer(): no buffer to sample")
        self._keep_state()
        learner, steps, local, lag_max = self.learner, [], [], None
        for _ in range(num_updates):
            start = time.perf_counter()
            sample = sample_frames(self._buffer, self._share)
            sampled = time.perf_counter()
            batch = sample.to(learner.device)
            lr = learner._lr()
            metrics = data_parallel_replay_step(learner, batch)
            written = time.perf_counter()
            if metrics is not None:
                lag = lag_metrics(sample, newest_policy_version)
                if lag:
                    metrics["policy_lag_mean"] = lag["policy_lag_mean"]
                    lag_max = (
                        lag["policy_lag_max"]
                        if lag_max is None
                        else lag_max.maximum(lag["policy_lag_max"])
                    )
                if write_priorities:
                    write_priorities_(learner.loss_module, self._buffer, sample, batch)
            steps.append((metrics, batch.shape[0]))
            own = learner._nonfinite.metrics(skipped=metrics is None, dropped=0)
            own["sample_ms"] = torch.tensor(1e3 * (sampled - start))
            own["priority_ms"] = torch.tensor(1e3 * (time.perf_counter() - written))
            local.append((own, lr))
        if newest_policy_version is not None:  # one more collective per call, not per step
            # a rank whose samples carried no versions takes part with -1 (below any lag)
            lag_max = allreduce.max_over_ranks(
                torch.tensor(-1.0) if lag_max is None else lag_max.float()
            )
        updates = []
        for reduced, (own, lr) in zip(reduce_replay_metrics(steps), local, strict=True):
            frames = int(reduced.pop("num_frames"))
            if lag_max is not None and "policy_lag_mean" in reduced and lag_max >= 0:
                reduced["policy_lag_max"] = lag_max  # the call's largest, on each of its steps
            updates.append(metrics_td({**reduced, **own}, lr=lr, num_frames=frames))
        weights = encode_tensordict(learner.weights()) if return_weights else None
        return RankResult(metrics=updates, version=learner.version, weights=weights)

    def _keep_state(self) -> None:
        """Copies the state before an update (to roll back to if a peer dies during it)."""
        before = self.learner.state_dict()
        before["generator"] = self.generator.get_state()
        self._before = copy.deepcopy(before)

    def roll_back(self) -> None:
        """Returns to the state before the last update (its peer died during it)."""
        if self._before is not None:
            state = dict(self._before)
            self.generator.set_state(state.pop("generator"))
            self.learner.load_state_dict(state)
            self._before = None

    def state_dict(self) -> dict[str, Any]:
        """The Learner's state (the group's checkpoint, rank 0's)."""
        return self.learner.state_dict()

    def generator_state(self) -> torch.Tensor:
        """The minibatch generator's state (copied to a rank that replaces a dead one)."""
        return self.generator.get_state()

    def load_state_dict(
        self, state: Mapping[str, Any], generator_state: torch.Tensor | None = None
    ) -> None:
        """Loads a Learner state; the minibatch order restarts from ``seed + version``.

        Args:
            state: a ``Learner.state_dict()``.
            generator_state: the peers' generator state, instead of reseeding.
        """
        self.learner.load_state_dict(dict(state))
        if generator_state is None:
            self.generator.manual_seed(self.spec.seed + self.learner.version)
        else:
            self.generator.set_state(generator_state)
        self._before = None

    def leave_group(self) -> None:
        """Leaves the gloo group, if in one. Idempotent."""
        allreduce.destroy_process_group()

    def shutdown(self) -> None:
        """Leaves the group (the pool kills the actor after)."""
        self.leave_group()
