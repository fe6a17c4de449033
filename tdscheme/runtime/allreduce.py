"""torch.distributed (gloo): rendezvous and the weighted all-reduce of gradients.

Shared by decentralized gradient workers and learner groups: one gloo process
group per process (the default group). The gradients of a rank are flattened into one buffer, scaled by its frame count,
with the frame count appended, and all-reduced (sum) in one call; every rank then
divides by the total frame count. Gloo's ring all-reduce finishes every element
on one rank and copies it to the others, so all ranks receive identical bits and,
applying them with identical optimizers, keep identical weights. A worker whose
gradient is not finite takes part with zeros and weight 0, so the mean is the
others'; when no rank has weight, every rank sees a total of 0 and skips the update.
A rank may also veto the step (a learner group's ranks skip together or not at all).
"""

from __future__ import annotations

import datetime
import math
import socket

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase

__all__ = [
    "destroy_process_group",
    "free_port",
    "init_process_group",
    "weighted_allreduce_mean",
]


def free_port() -> int:
    """A TCP port that is free on this host right now (the OS picks it).

    Example:
        >>> 0 < free_port() < 65536
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def init_process_group(
    *, rank: int, world_size: int, master_addr: str, master_port: int, timeout_s: float
) -> None:
    """Joins the gloo group of ``world_size`` ranks that rank 0 hosts at ``master_addr:master_port``.

    Blocks until every rank joined or ``timeout_s`` passed. Later collectives
    fail after ``timeout_s`` too, and at once when a peer process dies.

    Args:
        rank: this process's rank, in ``[0, world_size)``.
        world_size: number of ranks, ``>= 1``.
        master_addr: IP address of rank 0's host.
        master_port: a free port on rank 0's host.
        timeout_s: seconds to wait for the others (and for each collective).

    Raises:
        RuntimeError: this process is already in a process group.
        ValueError: ``rank`` or ``world_size`` out of range.

    Example:
        >>> init_process_group(rank=0, world_size=1, master_addr="127.0.0.1",
        ...                    master_port=free_port(), timeout_s=30)
        >>> weighted_allreduce_mean(TensorDict(g=torch.ones(2)), 3.0)[1]
        3.0
        >>> weighted_allreduce_mean(TensorDict(g=torch.zeros(2)), 0.0)
        (None, 0.0)
        >>> destroy_process_group()
    """
    if not (isinstance(world_size, int) and world_size >= 1):
        raise ValueError(f"world_size={world_size!r} must be an int >= 1")
    if not (isinstance(rank, int) and 0 <= rank < world_size):
        raise ValueError(f"rank={rank!r} must be an int in [0, world_size={world_size})")
    if dist.is_initialized():
        raise RuntimeError(
            "this process is already in a torch.distributed process group; call "
            "destroy_process_group() first"
        )
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def destroy_process_group() -> None:
    """Leaves the process group, if this process is in one. Idempotent."""
    if dist.is_initialized():
        dist.destroy_process_group()


def weighted_allreduce_mean(
    grads: TensorDictBase,
    weight: float,
    *,
    veto: bool = False,
    dtype: torch.dtype = torch.float64,
) -> tuple[TensorDict | None, float]:
    """The ``weight``-weighted mean of every rank's ``grads``, in one all-reduce.

    A rank with nothing usable (e.g. a non-finite gradient) takes part with zeros
    and weight 0: the mean is then the others'.

    Args:
        grads: this rank's gradient TensorDict (same keys and shapes on every rank);
            finite, as ``0 * inf`` would still poison the sum.
        weight: this rank's weight, e.g. its frame count; ``>= 0``.
        veto: this rank asks every rank to skip the step (send zeros with it).
        dtype: what the sum is taken in: ``float64`` (the default) rounds nothing a
            float32 gradient holds; ``float32`` sends half the bytes.

    Returns:
        ``(sum_r weight_r * grads_r / sum_r weight_r, sum_r weight_r)``: a new
        TensorDict with ``grads``' keys, identical on every rank, and the total
        weight; the mean is ``None`` on every rank when the total weight is 0
        or any rank vetoed (the total weight is then ``0.0``).

    Raises:
        RuntimeError: no process group, a peer died, or the collective timed out.
        ValueError: ``weight`` is negative or not finite.
    """
    if not dist.is_initialized():
        raise RuntimeError("weighted_allreduce_mean needs init_process_group() first")
    if not (math.isfinite(weight) and weight >= 0):
        raise ValueError(f"weight={weight!r} is invalid; accepted: a finite number >= 0")
    keys = sorted(grads.keys(include_nested=True, leaves_only=True), key=str)
    leaves = [grads.get(key) for key in keys]
    parts = [leaf.detach().reshape(-1).to(dtype) * weight for leaf in leaves]
    flat = torch.cat([*parts, torch.tensor([float(weight), float(veto)], dtype=dtype)])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    total, vetoes = float(flat[-2]), float(flat[-1])
    if vetoes > 0:
        return None, 0.0
    if total <= 0:
        return None, total
    mean = flat[:-2] / total
    out, offset = {}, 0
    for key, leaf in zip(keys, leaves, strict=True):
        out[key] = mean[offset : offset + leaf.numel()].reshape(leaf.shape).to(leaf.dtype)
        offset += leaf.numel()
    return TensorDict(out, batch_size=[]), total


def max_over_ranks(value: torch.Tensor) -> torch.Tensor:
    """The largest of every rank's scalar ``value`` (a collective: every rank calls it)."""
    out = value.detach().double().cpu().reshape(1).clone()
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out.reshape(()).to(value.dtype)
