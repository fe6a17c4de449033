"""Episode metrics of a collected batch: mean return and length of the episodes that ended in it."""

from __future__ import annotations

from tensordict import TensorDictBase

from tdscheme.keys import MASK_KEY

__all__ = ["episode_metrics"]


def episode_metrics(batch: TensorDictBase) -> dict[str, float]:
    """Mean return and length of the episodes that finished in ``batch``.

    Args:
        batch: collected frames with ``("next", "done")`` and, from torchrl's
            ``RewardSum`` and ``StepCounter`` transforms, ``("next",
            "episode_reward")`` and ``("next", "step_count")``.

    Returns:
        ``train/episode_return``, ``train/episode_length`` (when recorded) and
        ``train/episodes``; empty when no episode finished or nothing is recorded.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"next": TensorDict(
        ...     done=torch.tensor([[False], [True], [True]]),
        ...     episode_reward=torch.tensor([[1.0], [2.0], [4.0]]),
        ...     step_count=torch.tensor([[1], [2], [6]]), batch_size=[3])}, batch_size=[3])
        >>> episode_metrics(batch)
        {'train/episodes': 2.0, 'train/episode_return': 3.0, 'train/episode_length': 4.0}
    """
    done = batch.get(("next", "done"), None)
    returns = batch.get(("next", "episode_reward"), None)
    if done is None or returns is None:
        return {}
    done = done.reshape(returns.shape)
    mask = batch.get(MASK_KEY, None)
    if mask is not None:
        done = done & mask.reshape(*mask.shape, *([1] * (done.ndim - mask.ndim))).bool()
    if not done.any():
        return {}
    out = {"train/episodes": float(done.sum().item())}
    out["train/episode_return"] = returns[done].float().mean().item()
    lengths = batch.get(("next", "step_count"), None)
    if lengths is not None:
        out["train/episode_length"] = lengths.reshape(done.shape)[done].float().mean().item()
    return out
