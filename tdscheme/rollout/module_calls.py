"""How the lean rollout calls its policy: a plain ``TensorDictModule``'s module directly, as a chain.

:func:`policy_call` gives the lean rollout its per-step call, ``inputs -> outputs``
(dicts of tensors by key). A plain ``TensorDictModule`` (no kwargs mapping, method,
get kwargs or hooks of its own, reading only what the loop holds) has its module
called on its ``in_keys``, which is what its ``forward`` does, without building the
output TensorDict (tensordict 0.14 passes each output through
``TensorDict.from_any``, which searches the disk for pandas at every call); any
other policy is called on a carrier TensorDict, as torchrl calls it.

``module(x)`` runs ``nn.Module.__call__``: ``_wrapped_call_impl``, then
``_call_impl``, which checks the module's and the global hooks and, finding
none, calls ``module.forward(x)``; an ``nn.Sequential`` then does the same for
each of its children. On a small MLP these layers cost about as much as the
matrix products (a few microseconds per module per call, eight modules in
``Sequential(Sequential(Linear, Tanh, Linear, Tanh, Linear), head)``), and the
lean rollout calls its policy once per step.

:func:`direct_forward` returns ``module`` itself, or, where torch's own fast
path would run (no hooks on any module nor global ones, no module compiled in
place with ``module.compile()``, no class that overrides ``__call__`` or
``_call_impl``, no JIT tracing), the chain of the leaf modules' ``forward``
methods that ``module(x)`` would call in the same order: the same call, bit for
bit. Nested plain ``nn.Sequential`` containers are unrolled; any other module
is a leaf, its own ``forward`` called as it is. The lean rollout builds it once
per batch, so that a hook registered between batches is honoured from the next
batch on.

Example:
    >>> import torch
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.Tanh()), nn.Linear(8, 2))
    >>> call = direct_forward(net)
    >>> x = torch.randn(3, 4)
    >>> bool(torch.equal(call(x), net(x)))
    True
    >>> handle = net[1].register_forward_hook(lambda module, args, out: out * 0)
    >>> direct_forward(net) is net  # a hook: the module's own call
    True
    >>> handle.remove()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torch.nn.modules import module as torch_module

__all__ = ["direct_forward", "policy_call"]

_GLOBAL_HOOKS = (
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
)
_MODULE_HOOKS = ("_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks")


def policy_call(
    policy: Any, readable: set[Any], as_carrier: Callable[[dict[Any, torch.Tensor]], Any]
) -> Callable[[dict[Any, torch.Tensor]], Any]:
    """The per-step call of ``policy``, ``inputs -> outputs`` by key (see the module).

    Args:
        policy: the collector's (wrapped) policy.
        readable: the keys the loop's inputs hold (observations, trajectory ids, flags).
        as_carrier: ``inputs -> TensorDict``, for a policy called as torchrl calls it.

    Returns:
        The call; a direct one has ``reads``, the keys it reads.
    """
    if _is_plain_module(policy) and set(policy.in_keys) <= readable:
        module = direct_forward(policy.module)  # built per batch: hooks added since count
        in_keys, out_keys = list(policy.in_keys), list(policy.out_keys_source)
        if len(in_keys) == 1 and len(out_keys) == 1:  # the common case, a call less a step
            (in_key,), (out_key,) = in_keys, out_keys

            def single(inputs: dict[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
                result = module(inputs[in_key])
                if isinstance(result, (tuple, dict, TensorDictBase)):
                    return _outputs(result, out_keys)
                return {out_key: result}

            call: Any = single
        else:

            def direct(inputs: dict[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
                return _outputs(module(*(inputs[key] for key in in_keys)), out_keys)

            call = direct
        call.reads = in_keys
        return call

    def generic(inputs: dict[Any, torch.Tensor]) -> Any:
        return policy(as_carrier(inputs))

    return generic


def _outputs(result: Any, out_keys: list[Any]) -> dict[Any, torch.Tensor]:
    """A module's result by out key, as ``TensorDictModule`` writes it."""
    if isinstance(result, (dict, TensorDictBase)):
        result = tuple(result[key] for key in out_keys)
    elif not isinstance(result, tuple):
        result = (result,)
    return dict(zip(out_keys, result, strict=True))


def _is_plain_module(policy: Any) -> bool:
    """Whether ``policy`` is a ``TensorDictModule`` whose forward only maps in_keys to out_keys."""
    return (
        type(policy) is TensorDictModule
        and policy._kwargs is None
        and policy.method is None
        and not policy.method_kwargs
        and not policy._get_kwargs
        and not policy._forward_hooks
        and not policy._forward_pre_hooks
        and "_" not in policy.out_keys_source
    )


def direct_forward(module: nn.Module) -> Callable[..., Any]:
    """``module``'s call as its leaf modules' ``forward`` chain, or ``module`` (see the module).

    Args:
        module: the policy's ``nn.Module`` (a ``TensorDictModule``'s ``module``).

    Returns:
        A callable taking ``module``'s positional inputs and returning its output.
    """
    if torch._C._get_tracing_state() or any(getattr(torch_module, h, None) for h in _GLOBAL_HOOKS):
        return module
    leaves = _leaves(module)
    if leaves is None:
        return module
    forwards = [leaf.forward for leaf in leaves]
    if len(forwards) == 1:
        return forwards[0]

    first, rest = forwards[0], forwards[1:]  # sliced once, not at every call

    def chain(*inputs: Any) -> Any:
        value = first(*inputs)
        for forward in rest:
            value = forward(value)
        return value

    return chain


def _leaves(module: nn.Module) -> list[nn.Module] | None:
    """The modules ``module(x)`` calls forward on, in order, or ``None`` if any would differ."""
    if not _plain_call(module):
        return None
    if type(module) is not nn.Sequential:
        return [module]
    leaves: list[nn.Module] = []
    for child in module:
        below = _leaves(child)
        if below is None:
            return None
        leaves.extend(below)
    return leaves or None  # an empty Sequential returns its input: left to its own call


def _plain_call(module: nn.Module) -> bool:
    """Whether ``module(x)`` is ``module.forward(x)``: torch's fast path, as ``_call_impl`` takes it."""
    cls = type(module)
    return (
        isinstance(module, nn.Module)
        and cls.__call__ is nn.Module.__call__
        and cls._call_impl is nn.Module._call_impl
        and getattr(module, "_compiled_call_impl", None) is None
        and not isinstance(module, torch.jit.ScriptModule)
        and not any(getattr(module, hooks, None) for hooks in _MODULE_HOOKS)
    )
