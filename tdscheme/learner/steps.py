"""One optimizer step: the loss's terms summed and backpropagated, the norm clipped, the step taken.

These are the mechanics under every :class:`~tdscheme.learner.Learner` update, plain
functions of the loss module, its trainable parameters and its optimizer: the
Learner decides when to step (epochs, minibatches, gradients computed elsewhere);
this module says how one step goes and what it reports.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from tensordict.nn import TensorDictModule
    >>> layer = torch.nn.Linear(2, 1)
    >>> module = TensorDictModule(layer, in_keys=["x"], out_keys=["loss_mse"])
    >>> params = dict(layer.named_parameters())
    >>> optimizer = torch.optim.SGD(params.values(), lr=0.1)
    >>> metrics = backward(module, TensorDict(x=torch.ones(4, 2), batch_size=[4]))
    >>> sorted(metrics)
    ['loss', 'loss_mse']
    >>> norm = clip_and_step_(params, optimizer, max_grad_norm=1.0)
    >>> all(p.grad is None for p in params.values()), bool(norm > 0)
    (True, True)
    >>> metrics_td({"loss": metrics["loss"]}, lr=0.1, num_frames=4)["num_frames"]
    tensor(4.)
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torch.optim import Optimizer

from tdscheme.learner.nonfinite import SkippedStep

__all__ = ["backward", "clip_and_step_", "metrics_td", "total_grad_norm", "zero_grad_"]


def backward(loss_module: nn.Module, minibatch: TensorDictBase) -> dict[str, torch.Tensor]:
    """Runs the loss, sums its ``loss_*`` terms into ``loss`` and backpropagates it.

    Args:
        loss_module: a torchrl loss (or any module returning a TensorDict of terms).
        minibatch: the frames to train on.

    Returns:
        Detached scalars: every floating-point scalar term the loss returned (nested
        keys joined with ``"."``; ``loss_*`` terms averaged) and ``loss``, their sum.

    Raises:
        RuntimeError: the loss returned no differentiable ``loss_*`` (or ``loss``) term.
    """
    out = loss_module(minibatch)
    metrics: dict[str, torch.Tensor] = {}
    total = None
    for key, value in out.items(include_nested=True, leaves_only=True):
        name = key if isinstance(key, str) else ".".join(key)
        leaf = key if isinstance(key, str) else key[-1]
        if not torch.is_floating_point(value):
            continue
        if leaf.startswith("loss_") or leaf == "loss":  # DQNLoss returns one "loss"
            value = value.mean()
            total = value if total is None else total + value
        elif value.numel() != 1:
            continue
        metrics[name] = value.detach().reshape(())
    if total is None or not total.requires_grad:
        raise RuntimeError(
            f"{type(loss_module).__name__} returned no differentiable 'loss_*' "
            f"term; got keys {sorted(map(str, out.keys(True, True)))}"
        )
    total.backward()
    metrics["loss"] = total.detach()
    return metrics


def total_grad_norm(
    params: Mapping[str, nn.Parameter], *, device: str | torch.device | None = None
) -> torch.Tensor:
    """The total 2-norm of the parameters' gradients (those that have one), on ``device``."""
    grads = [p.grad for p in params.values() if p.grad is not None]
    norm = nn.utils.get_total_norm(grads)
    return norm if device is None else norm.to(device)


def clip_and_step_(
    params: Mapping[str, nn.Parameter],
    optimizer: Optimizer,
    *,
    max_grad_norm: float | None,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """Clips the gradients to ``max_grad_norm``, steps the optimizer, clears the gradients.

    Args:
        params: the trainable parameters, holding their gradients.
        optimizer: the optimizer over them.
        max_grad_norm: the total norm to clip to; ``None``: no clipping.
        device: where the returned norm goes (``None``: where torch computed it).

    Returns:
        The detached total gradient norm before clipping.

    Raises:
        SkippedStep: the norm is NaN or inf; the gradients are cleared, no step is taken.
    """
    if max_grad_norm is None:
        grad_norm = total_grad_norm(params, device=device)
    else:
        with_grad = [p for p in params.values() if p.grad is not None]
        grad_norm = nn.utils.clip_grad_norm_(with_grad, max_grad_norm)
    if not bool(torch.isfinite(grad_norm)):
        zero_grad_(params)
        raise SkippedStep(f"non-finite gradient norm ({float(grad_norm)})")
    optimizer.step()
    zero_grad_(params)
    return grad_norm.detach()


def zero_grad_(params: Mapping[str, nn.Parameter]) -> None:
    """Sets every parameter's ``.grad`` to ``None``."""
    for param in params.values():
        param.grad = None


def metrics_td(
    metrics: Mapping[str, torch.Tensor], *, lr: float, num_frames: int | None = None
) -> TensorDict:
    """The metrics TensorDict a Learner returns: detached float scalars on CPU.

    Args:
        metrics: scalar tensors by name.
        lr: the learning rate the step used, added as ``lr``.
        num_frames: the frames trained on, added as ``num_frames`` when given.
    """
    out = {key: value.detach().float().cpu() for key, value in metrics.items()}
    out["lr"] = torch.tensor(lr, dtype=torch.float32)
    if num_frames is not None:
        out["num_frames"] = torch.tensor(float(num_frames))
    return TensorDict(out, batch_size=[])
