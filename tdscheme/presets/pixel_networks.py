"""The pixel actor-critic of the Atari presets: a CNN trunk shared by two linear heads.

Two trunks (``network=``), uint8 frames scaled to [0, 1], torchrl's ``ConvNet`` and
``MLP``, all ReLU:

* ``"shallow"`` (default): the IMPALA paper's shallow model (Espeholt et al. 2018):
  conv 16 8x8 stride 4, conv 32 4x4 stride 2, 256 units;
* ``"nature"``: Mnih et al. 2015's network, the one torchrl's IMPALA example
  (``sota-implementations/impala``) trains: conv 32 8x8/4, 64 4x4/2, 64 3x3/1, 512 units.

The policy logits and the state value are two linear heads on the trunk. torchrl's ``ActorValueOperator`` shares the
trunk: the actor (trunk + policy head) runs in the workers, the loss trains both
heads and the trunk once.

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

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Categorical
from torchrl.modules import MLP, ActorValueOperator, ConvNet, ProbabilisticActor, ValueOperator

from tdscheme.validation import check_choice

__all__ = ["PIXEL_NETWORKS", "PixelScale", "pixel_actor_critic", "pixel_trunk"]

#: Each trunk's conv layers ``(channels, kernel, stride)`` and its hidden units.
PIXEL_NETWORKS = {
    "shallow": (((16, 8, 4), (32, 4, 2)), 256),
    "nature": (((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512),
}


class PixelScale(nn.Module):
    """uint8 pixels to floats in [0, 1] (frames stay uint8 in the env and on the wire)."""

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return pixels.to(torch.float32) / 255.0


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
    check_choice("network", network, tuple(PIXEL_NETWORKS))
    layers, hidden = PIXEL_NETWORKS[network]
    channels, height, width = frame_shape
    convs = ConvNet(
        in_features=channels, num_cells=[c for c, _, _ in layers],
        kernel_sizes=[k for _, k, _ in layers], strides=[s for _, _, s in layers],
        activation_class=nn.ReLU,
    )  # fmt: skip
    with torch.no_grad():
        flat = convs(torch.zeros(channels, height, width)).shape[-1]
    fc = MLP(in_features=flat, out_features=hidden, num_cells=[], activate_last_layer=True,
             activation_class=nn.ReLU)  # fmt: skip
    return nn.Sequential(PixelScale(), convs, fc)


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
    with torch.no_grad():  # a near-uniform first policy (CleanRL's small last layer)
        head.weight.mul_(0.01)
        head.bias.zero_()
    policy = ProbabilisticActor(
        TensorDictModule(head, in_keys=["hidden"], out_keys=["logits"]), in_keys=["logits"],
        out_keys=["action"], distribution_class=torch.distributions.Categorical,
        spec=Categorical(num_actions), return_log_prob=True,
    )  # fmt: skip
    value = ValueOperator(nn.Linear(hidden, 1), in_keys=["hidden"])
    shared = ActorValueOperator(trunk, policy, value)
    return {"actor": shared.get_policy_operator(), "critic": shared.get_value_operator()}
