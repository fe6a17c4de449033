"""LearnerGroup: N learner ranks in one gloo group, used by the driver like one Learner.

The driver keeps its own :class:`~tdscheme.learner.Learner` as a *mirror*: its
``policy`` is what collectors and evaluations run, and after every update it
holds rank 0's weights and version. Each :meth:`LearnerGroup.update` splits the
batch into contiguous shards of env rows, one per rank, sends each shard to its
rank (once) and returns the group's metrics; the ranks take together exactly the
optimizer steps one Learner takes on the whole batch (see
:mod:`tdscheme.learner.data_parallel`). A replay learner's group
(:meth:`LearnerGroup.replay_updates`) is given a Ray-held buffer instead: each rank
samples its share of every minibatch through its own client of it, so no frame
passes through the driver.

Faults: a rank that dies (or hangs past ``timeout_s``, and is then killed) is a
restart of the whole group: the survivors roll back to their state before the
update, the dead rank is rebuilt with a survivor's state (one warning line,
counted in :attr:`LearnerGroup.restarts`, at most ``max_restarts`` per rank), the
group is formed again and the update runs again. An exception raised inside a
rank is re-raised on the driver as a :class:`~tdscheme.errors.LearnerGroupError`
with the rank and its remote traceback.

"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ray
import torch
from tensordict import TensorDict, TensorDictBase

from tdscheme.errors import LearnerGroupError
from tdscheme.learner.group_rank import LearnerRank, LearnerRankSpec, RankResult
from tdscheme.learner.learner import Learner
from tdscheme.learner.offpolicy import is_prioritized
from tdscheme.runtime import RayLease
from tdscheme.runtime.actor_pool import DIED, ActorPool
from tdscheme.runtime.placement import gang, in_bundle
from tdscheme.transport import decode_tensordict, encode_tensordict

__all__ = ["LearnerGroup", "split_rows"]

logger = logging.getLogger(__name__)


def split_rows(batch: TensorDictBase, num_shards: int) -> list[TensorDictBase]:
    """Splits a batch into ``num_shards`` contiguous shards of whole env rows (time last).

    Args:
        batch: frames shaped ``[N, T]`` or ``[W, N, T]``; rows are all dimensions but the last.
        num_shards: how many shards; at most the number of rows.

    Raises:
        ValueError: the batch has no env rows to split or fewer rows than shards.

    Example:
        >>> batch = TensorDict(x=torch.arange(12).reshape(2, 3, 2), batch_size=[2, 3, 2])
        >>> [tuple(s.shape) for s in split_rows(batch, 4)]
        [(2, 2), (2, 2), (1, 2), (1, 2)]
    """
    if batch.batch_dims < 2:
        raise ValueError(
            f"a learner group splits batches by env rows; got batch_size "
            f"{tuple(batch.batch_size)}; accepted: [num_envs, T] or [workers, num_envs, T]"
        )
    rows = batch.reshape(-1, batch.shape[-1])
    if rows.shape[0] < num_shards:
        raise ValueError(
            f"num_learners={num_shards} is more than the {rows.shape[0]} env rows of a batch "
            f"(batch_size {tuple(batch.batch_size)}); accepted: num_learners <= env rows"
        )
    return list(rows.tensor_split(num_shards, dim=0))


#: The arguments that set the ranks' resources, for placement errors.
_RESOURCES = "num_learners / learner_resources"


class _RankPool(ActorPool):
    error_class = LearnerGroupError


class LearnerGroup:
    """``num_learners`` learner ranks, trained data-parallel, behind a Learner's interface.

    Args:
        learner: the driver's Learner: the group starts from its state and mirrors
            rank 0's weights and version into it after every update.
        num_learners: ranks, ``>= 1``.
        policy_factory: builds the modules in each rank (picklable).
        learner_factory: builds each rank's Learner from them (picklable).
        resources: Ray options of each rank, e.g. ``{"num_cpus": 1}`` (the default)
            or ``{"num_cpus": 1, "num_gpus": 1}``; a rank runs one torch thread per
            whole CPU it asks for (at least one).
        seed: seeds the minibatch order (alike on every rank) and each rank's torch.
        timeout_s: the group's collective timeout and the bound of every call.
        max_restarts: rebuilds allowed per rank.
        actor_start_timeout_s: how long the ranks may take to be placed and built.
        placement: ``"check"``: fail at once if the cluster could never hold the
            ranks; ``"wait"``: wait ``actor_start_timeout_s`` (an autoscaler may add nodes).
        ray_init_config: ``ray.init`` arguments when no Ray runs yet (see
            :class:`~tdscheme.runtime.RayLease`).

    Raises:
        ValueError: ``num_learners`` is not an int ``>= 1``.
        PlacementError: the cluster cannot hold the ranks (the message names the request).
    """

    def __init__(
        self,
        learner: Learner,
        *,
        num_learners: int,
        policy_factory: Callable[[], Any],
        learner_factory: Callable[..., Learner],
        resources: Mapping[str, Any] | None = None,
        seed: int | None = 0,
        timeout_s: float = 300.0,
        max_restarts: int = 3,
        actor_start_timeout_s: float = 120.0,
        placement: str = "check",
        ray_init_config: Mapping[str, Any] | None = None,
    ) -> None:
        if not (isinstance(num_learners, int) and num_learners >= 1):
            raise ValueError(f"num_learners={num_learners!r} is invalid; accepted: an int >= 1")
        self.learner = learner
        self.num_learners = num_learners
        self.timeout_s = float(timeout_s)
        self.actor_start_timeout_s = float(actor_start_timeout_s)
        #: group restarts after a rank died or hung
        self.restarts = 0
        self._broken: str | None = None
        self._buffer: Any = None  # the replay buffer the ranks sample (replay_updates)
        options = dict(resources) if resources is not None else {"num_cpus": 1}
        # one torch thread per whole CPU the rank holds (at least one)
        threads = max(1, int(options.get("num_cpus", 1)))
        spec = LearnerRankSpec(
            policy_factory, learner_factory, 0 if seed is None else seed, num_threads=threads
        )
        self._lease = RayLease.acquire(ray_init_config)
        self.pool = _RankPool(LearnerRank, max_restarts=max_restarts, seed=seed)
        self._gang = None
        try:
            if placement == "check":
                self.pool.check_fits([options] * num_learners, argument=_RESOURCES)
            # gang-placed: all ranks or none (a rebuilt rank takes its own bundle back)
            self._gang = gang(
                options, num_learners, timeout_s=actor_start_timeout_s,
                what=LearnerGroupError.role, argument=_RESOURCES,
            )  # fmt: skip
            for rank in range(num_learners):
                self.pool.add_slot(spec, in_bundle(options, self._gang, rank))
            state = ray.put(learner.state_dict())
            for rank in range(num_learners):
                self.pool.start(rank, state=state)
            self.pool.wait_started(
                list(range(num_learners)), timeout_s=actor_start_timeout_s, argument=_RESOURCES
            )
            self._form_group()
        except BaseException:
            self.shutdown()
            raise

    @property
    def policy(self) -> torch.nn.Module:
        """The driver's mirror policy (rank 0's weights after every update)."""
        return self.learner.policy

    @property
    def version(self) -> int:
        """Updates taken (rank 0's version)."""
        return self.learner.version

    def update(self, batch: TensorDictBase) -> TensorDict:
        """Trains every rank on its shard of ``batch``; see :meth:`Learner.update`.

        Raises:
            ValueError: the batch has fewer env rows than ranks.
            LearnerGroupError: a rank raised (with its remote traceback), or a rank
                died past ``max_restarts``.
            RuntimeError: the group is broken by an earlier error.
        """
        if self._broken:
            raise RuntimeError(f"the learner group is broken ({self._broken}); build a new one")
        # encoded: numpy buffers cross Ray without a copy (torch's pickling copies twice)
        shards = [encode_tensordict(s) for s in split_rows(batch, self.num_learners)]
        return self._call_update("update", [(shard, r == 0) for r, shard in enumerate(shards)])

    def replay_updates(
        self,
        buffer: Any,
        num_updates: int,
        *,
        write_priorities: bool | None = None,
        newest_policy_version: int | None = None,
    ) -> list[TensorDict]:
        """``num_updates`` replay steps (see :meth:`OffPolicyLearner.replay_update`), each
        on one minibatch of ``buffer``'s batch size, its shares sampled by the ranks.

        Args:
            buffer: the Ray-held buffer (tdscheme's ``BoundedRayBuffer`` or torchrl's
                ``RayReplayBuffer``): each rank samples through its own ``buffer.client()``.
            num_updates: optimizer steps, all in one round trip to the ranks.
            write_priorities: each rank writes its frames' priorities back (``None``:
                when the buffer has a ``PrioritizedSampler``).
            newest_policy_version: as for ``replay_update`` (the sampled frames' lag).

        Returns:
            The metrics of each step, in order (identical on every rank).

        Raises:
            ValueError: the buffer's batch size is smaller than ``num_learners``.
            LearnerGroupError: as for :meth:`update`.
        """
        if num_updates <= 0:
            return []
        if self._buffer is not buffer:
            self._attach(buffer, range(self.num_learners))
        if write_priorities is None:
            write_priorities = is_prioritized(buffer)
        args = [
            (num_updates, write_priorities, newest_policy_version, rank == 0)
            for rank in range(self.num_learners)
        ]
        return self._call_update("replay_updates", args)

    def anneal_exploration_(self, frames: int) -> None:
        """Anneals the mirror policy's exploration (what the collectors run) by ``frames``."""
        self.learner.anneal_exploration_(frames)

    @property
    def config(self) -> Any:
        """The driver's Learner's :class:`~tdscheme.learner.LearnerConfig` (every rank's)."""
        return self.learner.config

    def policy_weights(self) -> TensorDict:
        """A CPU copy of the mirror policy's weights (rank 0's)."""
        return self.learner.policy_weights()

    def state_dict(self) -> dict[str, Any]:
        """Rank 0's Learner state: one state for the group, loadable by any Learner or group.

        The exploration state (epsilon, noise) is the mirror's: the driver anneals it.
        """
        state = self.pool.call(0, "state_dict", timeout_s=self.timeout_s)
        if "exploration" in state:
            state["exploration"] = self.learner.exploration_state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Loads a Learner state (from a group of any size or a Learner) into every rank and the mirror."""
        self.learner.load_state_dict(dict(state))
        ref = ray.put(dict(state))
        self.pool.call_all("load_state_dict", [(ref,)] * self.num_learners, self.timeout_s)

    def shutdown(self) -> None:
        """Kills every rank, frees their placement and releases Ray (stopped only if this group
        started it). Idempotent."""
        self.pool.shutdown()
        if self._gang is not None:
            ray.util.remove_placement_group(self._gang)
            self._gang = None
        self._lease.release()

    def __repr__(self) -> str:
        return f"LearnerGroup(num_learners={self.num_learners}, learner={self.learner!r})"

    # -- internals -------------------------------------------------------------------------

    def _form_group(self) -> None:
        addr, port = self.pool.call(0, "rendezvous_address", timeout_s=self.timeout_s)
        size = self.num_learners
        self.pool.call_all(
            "setup_process_group",
            [(rank, size, addr, port, self.timeout_s) for rank in range(size)],
            timeout_s=self.timeout_s + 30.0,
        )
        logger.info("learner group: %d ranks in a gloo group at %s:%d", size, addr, port)

    def _call_update(self, method: str, args: Sequence[tuple[Any, ...]]) -> Any:
        """Runs ``method`` on every rank (rank ``r`` with ``args[r]``), restarting the group
        on a lost rank; mirrors rank 0's weights and version; returns its metrics."""
        for _ in range(self.num_learners * (self.pool.max_restarts + 1) + 1):
            results, lost = self._run(method, args)
            if not lost:
                first: RankResult = results[0]
                self.learner.load_weights(decode_tensordict(first.weights))
                self.learner.version = first.version
                return first.metrics
            self._restart(lost)
        raise RuntimeError("the learner group's update failed too many times in a row")

    def _attach(self, buffer: Any, ranks: Iterable[int]) -> None:
        """Gives ``ranks`` a client of ``buffer`` and their share of its batch size."""
        batch_size = int(buffer.batch_size)
        if batch_size < self.num_learners:
            raise ValueError(
                f"num_learners={self.num_learners} is more than the replay buffer's batch_size="
                f"{batch_size}; accepted: num_learners <= batch_size"
            )
        shares = [len(part) for part in torch.arange(batch_size).tensor_split(self.num_learners)]
        for rank in ranks:
            client = buffer.client()
            self.pool.call(rank, "attach_buffer", client, shares[rank], timeout_s=self.timeout_s)
        self._buffer = buffer

    def _run(
        self, method: str, args: Sequence[tuple[Any, ...]]
    ) -> tuple[list[Any], dict[int, str]]:
        """One try of an update: each rank's result, and the ranks lost (dead or hung) with why."""
        refs = {self.pool.submit(r, method, *a): r for r, a in enumerate(args)}
        results: dict[int, Any] = {}
        lost: dict[int, str] = {}
        errors: list[LearnerGroupError] = []
        # the collectives time out first, so a rank still busy after this is hung
        deadline = time.monotonic() + self.timeout_s + min(30.0, self.timeout_s)
        pending = list(refs)
        while pending and time.monotonic() < deadline:
            for ref in self.pool.wait(pending, num_returns=len(pending), timeout_s=1.0):
                pending.remove(ref)
                rank = refs[ref]
                try:
                    value = self.pool.outcome(ref)
                except LearnerGroupError as err:
                    errors.append(err)
                    continue
                if value is DIED:
                    lost[rank] = self.pool.last_death.get(rank, "died")
                else:
                    results[rank] = value
        for ref in pending:  # hung: named, killed, restarted with the group
            rank = refs[ref]
            lost[rank] = f"did not finish an update in timeout_s={self.timeout_s:g} s (hung)"
            self.pool.kill(rank, lost[rank])
        self.pool.forget(pending)
        if errors and not lost:
            # a rank's own error, unless a peer's death (seen by a ping) explains it
            dead = [r for r, ok in enumerate(self.pool.answering(timeout_s=10.0)) if not ok]
            if not dead:
                self._broken = errors[0].message
                raise errors[0]
            lost = {r: self.pool.last_death.get(r, "died") for r in dead}
        return [results.get(r) for r in range(len(args))], lost

    def _restart(self, lost: Mapping[int, str]) -> None:
        survivors = [r for r in range(self.num_learners) if r not in lost]
        if not survivors:
            self._broken = "every rank died during one update"
            raise LearnerGroupError(0, f"every learner rank died during one update: {dict(lost)}")
        self.restarts += 1
        logger.warning(
            "learner group: restarting (restart %d): rank(s) %s lost: %s",
            self.restarts, sorted(lost), "; ".join(f"{r}: {why}" for r, why in lost.items()),
        )  # fmt: skip
        timeout_s = self.timeout_s
        for rank in survivors:
            self.pool.call(rank, "roll_back", timeout_s=timeout_s)
            self.pool.call(rank, "leave_group", timeout_s=timeout_s)
        state = self.pool.call(survivors[0], "state_dict", timeout_s=timeout_s)
        generator = self.pool.call(survivors[0], "generator_state", timeout_s=timeout_s)
        ref = ray.put(state)
        for rank in lost:
            self.pool.restart(rank, lost[rank], state=ref)
        self.pool.wait_started(
            sorted(lost), timeout_s=self.actor_start_timeout_s, argument=_RESOURCES
        )
        for rank in lost:
            self.pool.call(rank, "load_state_dict", ref, generator, timeout_s=timeout_s)
        if self._buffer is not None:
            self._attach(self._buffer, lost)
        self._form_group()
