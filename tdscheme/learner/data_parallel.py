"""One rank's share of a data-parallel update: the same steps as ``Learner.update``, gradients all-reduced.

Each rank of a learner group holds a :class:`~tdscheme.learner.Learner` built the
same way, with the same weights, and receives a *shard* of the batch: whole env
rows (the leading dimensions), so the value estimator (GAE, V-trace) sees whole
trajectories and gives each frame the advantage it would get in one process.
The ranks then take exactly the optimizer steps one Learner would take on the
whole batch:

* the frames are numbered globally (rank 0's valid frames first, then rank 1's,
  ...), and every rank draws the same permutation of those numbers from a
  generator seeded alike on all ranks: minibatch ``k`` of the group holds the
  frames minibatch ``k`` of one Learner holds when its global generator is seeded
  with the same seed; each rank trains on its part of it;
* advantage normalization (``normalize_advantage`` of torchrl's PPO losses) uses
  the mean and standard deviation of the whole minibatch (summed over the ranks),
  the loss's own per-rank normalization switched off meanwhile;
* each rank's gradient (the mean over its frames) is all-reduced weighted by its
  frame count (:func:`~tdscheme.runtime.allreduce.weighted_allreduce_mean`): the
  mean over the whole minibatch, identical bits on every rank, then clipped and
  stepped by identical optimizers, so the weights stay identical;
* a rank whose batch, loss or gradient holds NaN / inf vetoes the step: every rank
  skips the update together (never a divergence between ranks);
* metrics are the frame-weighted means over the ranks, as one Learner reports them.

An off-policy group (:func:`data_parallel_replay_step`) is simpler: each rank samples
its own share of the minibatch from the Ray-held replay buffer, and one step on all
the shares is the step one Learner takes on their concatenation (the same
frame-weighted all-reduce, the same veto), followed by identical target-network
updates on every rank.

Every rank must call :func:`data_parallel_update` for the same update; the
collectives fail after the group's timeout when a peer hangs, and at once when
one dies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase
from torchrl.objectives import LossModule

from tdscheme.learner.gradients import assign_gradients_, gradients_from_parameters
from tdscheme.learner.learner import Learner
from tdscheme.learner.nonfinite import SkippedStep, batch_source
from tdscheme.learner.steps import backward, metrics_td, total_grad_norm, zero_grad_
from tdscheme.runtime.allreduce import weighted_allreduce_mean

__all__ = [
    "check_group_loss",
    "data_parallel_replay_step",
    "data_parallel_update",
    "reduce_replay_metrics",
]


def check_group_loss(loss_module: LossModule) -> None:
    """Raises if a learner group could not reproduce this loss's normalization.

    Raises:
        ValueError: the loss normalizes advantages over some dimensions only
            (``normalize_advantage_exclude_dims``), which the group does not split.
    """
    if _normalizes(loss_module) and tuple(
        getattr(loss_module, "normalize_advantage_exclude_dims", ())
    ):
        raise ValueError(
            f"{type(loss_module).__name__}(normalize_advantage_exclude_dims="
            f"{loss_module.normalize_advantage_exclude_dims!r}) is not supported by learner "
            f"groups; accepted: normalize_advantage_exclude_dims=() or num_learners=0"
        )


def data_parallel_update(
    learner: Learner, shard: TensorDictBase, generator: torch.Generator
) -> TensorDict:
    """This rank's part of one data-parallel update; every rank calls it together.

    Args:
        learner: this rank's Learner (same construction and weights on every rank).
        shard: this rank's env rows of the batch, time last; at least one valid frame.
        generator: draws the minibatch order; seeded alike on every rank.

    Returns:
        The metrics :meth:`Learner.update` returns for the whole batch (identical
        on every rank): frame-weighted loss terms, ``grad_norm``, ``lr``,
        ``num_frames`` (all ranks' frames) and the non-finite counters.

    Raises:
        ValueError: some rank's shard has no valid frame (every rank raises).
        RuntimeError: a peer died or a collective timed out.
        tdscheme.errors.NonFiniteUpdateError: ``max_nonfinite_updates`` skipped in a row.
    """
    guard, config = learner._nonfinite, learner.config
    dropped = 0
    if config.drop_nonfinite_frames:
        shard, dropped = guard.drop_frames(shard)
    flat = learner._prepare(shard)
    problem = guard.check_batch(flat)
    counts, any_problem = _frame_counts(flat.shape[0], problem is not None)
    num_frames = int(counts.sum())
    lr = learner._lr()
    if any_problem:
        guard.skipped(problem or "another rank's batch held NaN / inf", source=batch_source(flat))
        return metrics_td(
            guard.metrics(skipped=True, dropped=dropped), lr=lr, num_frames=num_frames
        )
    offset = int(counts[: dist.get_rank()].sum())
    sums: dict[str, torch.Tensor] = {}
    steps = 0
    try:
        for _ in range(config.num_epochs):
            for part, group_size in _my_minibatches(flat, offset, num_frames, config, generator):
                share = part.shape[0] / group_size
                for key, value in _step(learner, part, group_size).items():
                    sums[key] = sums.get(key, 0.0) + value.detach().double().cpu() * share
                steps += 1
    except SkippedStep as skip:
        guard.skipped(str(skip), source=batch_source(flat))
        return metrics_td(
            guard.metrics(skipped=True, dropped=dropped), lr=lr, num_frames=num_frames
        )
    guard.succeeded()
    learner._finish_update()
    metrics = {key: value / steps for key, value in _sum_over_ranks(sums).items()}
    metrics.update(guard.metrics(skipped=False, dropped=dropped))
    return metrics_td(metrics, lr=lr, num_frames=num_frames)


def data_parallel_replay_step(
    learner: Learner, sample: TensorDictBase
) -> dict[str, torch.Tensor] | None:
    """This rank's part of one replay step (one optimizer step); every rank calls it together.

    Each rank brings its own sample (its share of the group's minibatch); the step
    is the one a Learner takes on all the ranks' samples together: each rank's
    mean gradient weighted by its frames (one all-reduce, which also carries every
    rank's veto), then identical clipping, optimizer and target-network steps.

    Args:
        learner: this rank's (off-policy) Learner.
        sample: this rank's frames, flat, on the learner's device.

    Returns:
        This rank's metrics of the step (the loss terms of its frames and the group's
        ``grad_norm``; :func:`reduce_replay_metrics` makes them the group's), or
        ``None`` when every rank skipped it (NaN / inf in some rank's sample, loss or
        gradient; counted by each rank's guard).
    """
    guard = learner._nonfinite
    try:
        metrics = _step(learner, sample, sample.shape[0], problem=guard.check_batch(sample))
    except SkippedStep as skip:
        guard.skipped(str(skip), source=batch_source(sample))
        return None
    guard.succeeded()
    learner._finish_update()
    return metrics


def reduce_replay_metrics(
    steps: Sequence[tuple[Mapping[str, torch.Tensor] | None, int]],
) -> list[dict[str, torch.Tensor]]:
    """The group's metrics of each replay step, from every rank's, in one all-reduce.

    Args:
        steps: per step, this rank's metrics (``None``: skipped) and its frames; the
            same steps, skipped alike, with the same metric names on every rank.

    Returns:
        Per step: each metric's frame-weighted mean over the ranks (what one Learner
        reports for the whole minibatch) and ``num_frames``, every rank's frames.
    """
    keys = sorted({key for metrics, _ in steps if metrics for key in metrics})
    vector = torch.zeros(len(steps), len(keys) + 1, dtype=torch.float64)
    for i, (metrics, frames) in enumerate(steps):
        vector[i, -1] = float(frames)
        for j, key in enumerate(keys):
            if metrics and key in metrics:
                vector[i, j] = float(metrics[key]) * frames
    dist.all_reduce(vector, op=dist.ReduceOp.SUM)
    out = []
    for i, (metrics, _) in enumerate(steps):
        total = float(vector[i, -1])
        reduced = {"num_frames": vector[i, -1]}
        for j, key in enumerate(keys):
            if metrics and key in metrics:
                reduced[key] = vector[i, j] / total
        out.append(reduced)
    return out


def _frame_counts(local: int, problem: bool) -> tuple[torch.Tensor, bool]:
    """Every rank's valid frame count, and whether any rank found NaN / inf in its batch."""
    world, rank = dist.get_world_size(), dist.get_rank()
    vector = torch.zeros(world + 1, dtype=torch.float64)
    vector[rank], vector[world] = float(local), float(problem)
    dist.all_reduce(vector, op=dist.ReduceOp.SUM)
    counts = vector[:world].long()
    empty = (counts == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(
            f"learner ranks {empty} got no valid frame; accepted: batches with at least "
            f"num_learners={world} env rows holding valid frames"
        )
    return counts, bool(vector[world] > 0)


def _my_minibatches(
    flat: TensorDictBase, offset: int, num_frames: int, config, generator: torch.Generator
) -> Iterator[tuple[TensorDictBase, int]]:
    """This rank's frames of each group minibatch, with the group minibatch's size."""
    size = num_frames if config.minibatch_size is None else min(config.minibatch_size, num_frames)
    order = None
    if config.shuffle and size < num_frames:
        order = torch.randperm(num_frames, generator=generator)
    mine = flat.shape[0]
    for start in range(0, num_frames, size):
        stop = min(start + size, num_frames)
        if order is None:
            lo, hi = max(start, offset), min(stop, offset + mine)
            local = torch.arange(max(lo, hi) - lo) + (lo - offset)
        else:
            chosen = order[start:stop]
            local = chosen[(chosen >= offset) & (chosen < offset + mine)] - offset
        yield flat[local.to(flat.device)], stop - start


def _step(
    learner: Learner, part: TensorDictBase, group_size: int, *, problem: str | None = None
) -> dict[str, torch.Tensor]:
    """One group optimizer step; returns this rank's metrics of it (none without frames).

    ``problem``: this rank's frames hold NaN / inf (it vetoes the step, in the same
    all-reduce as the gradients).

    Raises:
        SkippedStep: some rank vetoed the step (on every rank).
    """
    params, loss = learner._params, learner.loss_module
    metrics: dict[str, torch.Tensor] = {}
    zero_grad_(params)
    part = _normalized(loss, part, group_size)
    if part.shape[0] > 0 and problem is None:
        with _own_normalization_off(loss):
            metrics = backward(loss, part)
        norm = total_grad_norm(params)
        if not (bool(metrics["loss"].isfinite()) and bool(norm.isfinite())):
            problem = f"non-finite loss ({float(metrics['loss'])}) or gradient norm ({float(norm)})"
    grads = gradients_from_parameters(params)
    if problem is not None:
        grads.zero_()
    # float32: half the bytes of float64; the sum of a few ranks' float32 gradients rounds
    # at 1e-7 relative (the tests hold the group to one Learner within 1e-6 after 50 updates)
    mean, _ = weighted_allreduce_mean(
        grads, float(part.shape[0]), veto=problem is not None, dtype=torch.float32
    )
    if mean is None:
        zero_grad_(params)
        raise SkippedStep(problem or "another rank's frames, loss or gradient were not finite")
    assign_gradients_(params, mean)
    metrics["grad_norm"] = learner._clip_and_step().cpu()
    return metrics


def _normalizes(loss: LossModule) -> bool:
    return bool(getattr(loss, "normalize_advantage", False)) and (
        getattr(loss, "advantage_norm", None) is None
    )


def _normalized(loss: LossModule, part: TensorDictBase, group_size: int) -> TensorDictBase:
    """``part`` with its advantages standardized over the whole group minibatch (as torchrl does)."""
    if not _normalizes(loss) or group_size <= 1:
        return part
    key = loss.tensor_keys.advantage
    advantage = part.get(key) if part.shape[0] > 0 else None
    stats = torch.zeros(3, dtype=torch.float64)
    if advantage is not None:
        values = advantage.detach().double()
        stats[0], stats[1] = float(values.sum()), float(values.square().sum())
        stats[2] = values.numel()
    dist.all_reduce(stats, op=dist.ReduceOp.SUM)
    total, squares, count = stats.tolist()
    if advantage is None:
        return part
    mean = total / count
    # torch.std's unbiased estimate and torchrl's floor (float32 resolution)
    std = max(((squares - count * mean * mean) / max(count - 1.0, 1.0)) ** 0.5, 1e-6)
    part = part.copy()
    part.set(key, ((advantage.double() - mean) / std).to(advantage.dtype))
    return part


@contextlib.contextmanager
def _own_normalization_off(loss: LossModule) -> Iterator[None]:
    if not _normalizes(loss):
        yield
        return
    loss.normalize_advantage = False
    try:
        yield
    finally:
        loss.normalize_advantage = True


def _sum_over_ranks(sums: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    keys = sorted(sums)
    vector = torch.stack([torch.as_tensor(sums[key], dtype=torch.float64) for key in keys])
    dist.all_reduce(vector, op=dist.ReduceOp.SUM)
    return {key: vector[i] for i, key in enumerate(keys)}
