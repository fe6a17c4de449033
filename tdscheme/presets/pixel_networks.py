"""The pixel actor-critic of the Atari presets: a CNN trunk shared by two linear heads.

Two trunks (``network=``), uint8 frames scaled to [0, 1], torchrl's ``ConvNet`` and
``MLP``, all ReLU:

* ``"shallow"`` (default): the IMPALA paper's shallow model (Espeholt et al. 2018):
  conv 16 8x8 stride 4, conv 32 4x4 stride 2, 256 units;
* ``"nature"``: Mnih et al. 2015's network, the one torchrl's IMPALA example
  (``sota-implementations/impala``) trains: conv 32 8x8/4, 64 4x4/2, 64 3x3/1, 512 units.

The policy logits and the state value are two linear heads on the trunk; every layer
starts orthogonal with zero biases (CleanRL's and SB3's Atari initialization). torchrl's ``ActorValueOperator`` shares the
trunk: the actor (trunk + policy head) runs in the workers, the loss trains both
heads and the trunk. The critic is a :class:`SharedTrunkValue`: where the loss
has just run the actor's trunk on the same frames, the value head reads that
output instead of running the trunk a second time: one forward and one backward
pass of the CNN per minibatch instead of two (torchrl's losses call the actor
and the critic one after the other, each with the trunk), with the same
gradients.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> modules = pixel_actor_critic(num_actions=6)
    >>> td = TensorDict(observation=torch.zeros(2, 4, 84, 84, dtype=torch.uint8), batch_size=[2])
    >>> out = modules["actor"](td)
    >>> out["action"].shape, out["action"].dtype, out["action_log_prob"].shape
    (torch.Size([2]), torch.int64, torch.Size([2]))
    >>> modules["critic"](td)["state_value"].shape
    torch.Size([2, 1])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.data import Categorical
from torchrl.modules import MLP, ActorValueOperator, ConvNet, ProbabilisticActor, ValueOperator

from tdscheme.validation import check_choice

__all__ = [
    "PIXEL_NETWORKS",
    "PixelScale",
    "SharedTrunkValue",
    "conv_settings",
    "pixel_actor_critic",
    "pixel_trunk",
]

#: Each trunk's conv layers ``(channels, kernel, stride)`` and its hidden units.
PIXEL_NETWORKS = {
    "shallow": (((16, 8, 4), (32, 4, 2)), 256),
    "nature": (((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512),
}


class PixelScale(nn.Module):
    """uint8 pixels to floats in [0, 1] (frames stay uint8 in the env and on the wire)."""

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return pixels.to(torch.float32) / 255.0


class SharedTrunkValue(TensorDictModuleBase):
    """trunk + value head that reuses the trunk output the actor just computed, with its graph.

    The trunk's last run with gradients is recorded (its input tensor, its
    parameters' versions, its output). When this critic is next called with
    gradients on the *same* observation tensor and the parameters have not changed
    since (no optimizer step: their versions are the same), that output is the
    trunk's on these frames with these weights, so the head reads it instead of
    running the trunk again: torchrl's losses call the actor and then the critic on
    the same frames (PPO on the same TensorDict, A2C on a shallow copy), and the
    gradients are the same, summed through one graph. Any other call (without
    gradients, as the value estimator's; other frames; after a step) runs the
    trunk. A record is used once, and never pickled.

    Args:
        trunk: ``observation -> hidden``; shared with the actor.
        head: ``hidden -> state_value``.
    """

    def __init__(self, trunk: TensorDictModule, head: TensorDictModule) -> None:
        super().__init__()
        self.module = nn.ModuleList([trunk, head])  # the parameter names of torchrl's sequence
        self.in_keys = list(trunk.in_keys)
        self.out_keys = [*trunk.out_keys, *head.out_keys]
        self._record: tuple[torch.Tensor, tuple[int, ...], torch.Tensor] | None = None
        trunk.module.register_forward_hook(self._remember)

    def _versions(self) -> tuple[int, ...]:
        return tuple(p._version for p in self.module[0].parameters())

    def _remember(self, _: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
        if torch.is_grad_enabled() and output.requires_grad:
            self._record = (args[0], self._versions(), output)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        trunk, head = self.module
        record, self._record = self._record, None
        observation = tensordict.get(self.in_keys[0])
        if (
            record is not None
            and torch.is_grad_enabled()
            and record[0] is observation
            and record[1] == self._versions()
        ):
            tensordict.set(trunk.out_keys[0], record[2])
        else:
            tensordict = trunk(tensordict)
        return head(tensordict)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_record"] = None
        return state


def conv_settings(frame_shape: Sequence[int], network: str) -> tuple[dict[str, Any], int]:
    """A trunk's convolutions as torchrl ``ConvNet`` arguments (ReLU, no padding), and the
    number of features they give one ``(C, H, W)`` frame stack once flattened.

    Args:
        frame_shape: ``(stacked frames, height, width)`` of one observation.
        network: ``"shallow"`` or ``"nature"``.
    """
    check_choice("network", network, tuple(PIXEL_NETWORKS))
    layers, _ = PIXEL_NETWORKS[network]
    channels, height, width = frame_shape
    for _, kernel, stride in layers:
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    convs = {
        "in_features": channels, "num_cells": [c for c, _, _ in layers],
        "kernel_sizes": [k for _, k, _ in layers], "strides": [s for _, _, s in layers],
        "activation_class": nn.ReLU,
    }  # fmt: skip
    return convs, layers[-1][0] * height * width


def pixel_trunk(
    frame_shape: Sequence[int] = (4, 84, 84), *, network: str = "shallow"
) -> nn.Sequential:
    """A CNN trunk over ``[*batch, C, H, W]`` uint8 frames (see the module).

    Args:
        frame_shape: ``(stacked frames, height, width)`` of one observation.
        network: ``"shallow"`` or ``"nature"``.

    Returns:
        ``frames -> [*batch, hidden]`` features (``hidden``: 256 or 512).
    """
    convs, flat = conv_settings(frame_shape, network)
    hidden = PIXEL_NETWORKS[network][1]
    fc = MLP(in_features=flat, out_features=hidden, num_cells=[], activate_last_layer=True,
             activation_class=nn.ReLU)  # fmt: skip
    # channels-last conv weights: oneDNN's preferred layout on CPU; each conv then runs
    # NHWC (its input converted once); ppo-pong's update 1.04x (0.89x-1.33x) faster alone,
    # 1.26x with OnePassValues (benchmarks/pixel_learner.py, RESULTS.md)
    return nn.Sequential(PixelScale(), ConvNet(**convs), fc).to(memory_format=torch.channels_last)


def pixel_actor_critic(
    num_actions: int, *, frame_shape: Sequence[int] = (4, 84, 84), network: str = "shallow"
) -> dict[str, nn.Module]:
    """A categorical actor and a critic sharing :func:`pixel_trunk`.

    Args:
        num_actions: the discrete actions (index actions, as the Atari envs take).
        frame_shape: ``(stacked frames, height, width)``.
        network: the trunk, ``"shallow"`` or ``"nature"``.

    Returns:
        ``{"actor": ProbabilisticActor-like, "critic": ValueOperator-like}``; the actor
        writes ``action`` (int64 index) and ``action_log_prob``.
    """
    trunk = TensorDictModule(
        pixel_trunk(frame_shape, network=network), in_keys=["observation"], out_keys=["hidden"]
    )
    hidden = PIXEL_NETWORKS[network][1]
    head = nn.Linear(hidden, num_actions)
    value_head = nn.Linear(hidden, 1)
    # Orthogonal weights and zero biases, as CleanRL's and SB3's Atari networks: gain sqrt(2)
    # in the ReLU trunk, 0.01 for the policy (a near-uniform first policy), 1 for the value
    _orthogonal_(trunk.module, gain=2**0.5)
    _orthogonal_(head, gain=0.01)
    _orthogonal_(value_head, gain=1.0)
    policy = ProbabilisticActor(
        TensorDictModule(head, in_keys=["hidden"], out_keys=["logits"]), in_keys=["logits"],
        out_keys=["action"], distribution_class=torch.distributions.Categorical,
        spec=Categorical(num_actions), return_log_prob=True,
    )  # fmt: skip
    value = ValueOperator(value_head, in_keys=["hidden"])
    shared = ActorValueOperator(trunk, policy, value)
    return {"actor": shared.get_policy_operator(), "critic": SharedTrunkValue(trunk, value)}


def _orthogonal_(module: nn.Module, *, gain: float) -> None:
    """Orthogonal weights (scaled by ``gain``) and zero biases for every conv and linear layer."""
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                weight = torch.empty(layer.weight.shape)  # orthogonal_ views it flat:
                nn.init.orthogonal_(weight, gain)  # a channels-last weight cannot be
                layer.weight.copy_(weight)
                nn.init.zeros_(layer.bias)
