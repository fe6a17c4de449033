"""The policy's module called as its leaf modules' forward chain: the same outputs, hooks honoured."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdscheme.envs import make_env
from tdscheme.rollout.lean import LeanCollector
from tdscheme.rollout.module_calls import direct_forward


class OneHotHead(nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1])


class Doubling(nn.Module):
    """A module whose class overrides ``__call__``: its call is not its ``forward``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


def nested_net() -> nn.Module:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    return nn.Sequential(mlp, OneHotHead())


def test_the_chain_is_the_module_call_bit_for_bit() -> None:
    net = nested_net()
    call = direct_forward(net)
    assert call is not net  # unrolled: Linear, Tanh, Linear, OneHotHead
    for _ in range(3):
        x = torch.randn(64, 4)
        assert torch.equal(call(x), net(x))
    single = nn.Linear(4, 2)
    assert direct_forward(single) == single.forward  # one leaf: its forward
    x = torch.randn(5, 4)
    assert torch.equal(direct_forward(single)(x), single(x))


@pytest.mark.parametrize(
    "case", ["forward hook", "pre hook", "global hook", "own __call__", "compiled in place"]
)
def test_anything_the_call_would_do_beyond_forward_keeps_the_module_call(case: str) -> None:
    net = nested_net()
    handles = []
    if case == "forward hook":
        handles.append(net[0][1].register_forward_hook(lambda m, a, out: out * 0))
    elif case == "pre hook":
        handles.append(net[1].register_forward_pre_hook(lambda m, a: a))
    elif case == "global hook":
        handles.append(nn.modules.module.register_module_forward_hook(lambda m, a, out: out))
    elif case == "own __call__":
        net = nn.Sequential(nn.Linear(4, 2), Doubling())
    else:
        net[0].compile()  # sets _compiled_call_impl: torch calls the compiled module
    try:
        assert direct_forward(net) is net
    finally:
        for handle in handles:
            handle.remove()
    fresh = nested_net()
    assert direct_forward(fresh) is not fresh  # the hooks are gone again: the chain


def test_the_lean_rollout_honours_a_hook_registered_between_batches() -> None:
    env = make_env("CartPole-v1", num_envs=4)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)), OneHotHead())
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    collector = LeanCollector(
        env, policy, frames_per_batch=32, total_frames=96, auto_register_policy_transforms=False
    )
    try:
        assert collector.lean_reason is None
        batches = iter(collector)
        first = next(batches)
        assert first["action"].sum(-1).eq(1).all()  # one-hot actions from the unrolled chain
        seen: list[int] = []
        handle = net[1].register_forward_hook(lambda m, a, out: seen.append(1) or out * 0)
        try:
            second = next(batches)
        finally:
            handle.remove()
        assert len(seen) == 8  # one call per step of the batch (32 frames / 4 copies)
        assert second["action"].eq(0).all()  # the hook's output is what the batch holds
        assert next(batches)["action"].sum(-1).eq(1).all()  # removed: the chain again
    finally:
        collector.shutdown()
