"""pack_transitions: each row's transitions moved to its front, in order, the rest zeroed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdscheme.keys import MASK_KEY
from tdscheme.rollout.env_steps import pack_transitions


def _batch(batch: tuple[int, ...], seed: int) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "observation": torch.randn(*batch, 4, generator=g),
            "pixels": torch.randint(0, 256, (*batch, 2, 3, 3), generator=g, dtype=torch.uint8),
            "action": torch.randint(0, 5, batch, generator=g),
            "half": torch.randn(*batch, 3, generator=g).to(torch.bfloat16),
            # not contiguous: numpy cannot view its frames as whole elements
            "strided": torch.randn(*batch[:-1], 2, batch[-1], generator=g).transpose(-1, -2),
            "next": {"done": torch.rand(*batch, 1, generator=g) < 0.5},
        },
        batch_size=batch,
    )


def _reference(value: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Row by row: the valid frames first, in order, then zeros."""
    steps = valid.shape[-1]
    rows, flags = value.reshape(-1, steps, *value.shape[valid.ndim :]), valid.reshape(-1, steps)
    packed = torch.zeros_like(rows)
    for i in range(rows.shape[0]):
        kept = rows[i][flags[i]]
        packed[i, : len(kept)] = kept
    return packed.reshape(value.shape)


@pytest.mark.parametrize("batch", [(5, 7), (2, 3, 6), (4, 1)])
@pytest.mark.parametrize("seed", range(4))
def test_pack_transitions_moves_each_rows_transitions_to_its_front_and_zeroes_the_rest(
    batch: tuple[int, ...], seed: int
) -> None:
    td = _batch(batch, seed)
    before = td.clone()
    rng = np.random.default_rng(seed)
    valid = torch.from_numpy(rng.random(batch) < (0.2 + 0.2 * seed))
    pack_transitions(td, valid, len(batch) - 1)
    for key in before.keys(True, True):
        assert torch.equal(td.get(key), _reference(before.get(key), valid)), key
    counts = valid.sum(-1, keepdim=True)
    assert torch.equal(td.get(MASK_KEY), torch.arange(batch[-1]) < counts)


def test_pack_transitions_packs_the_named_keys_only_and_an_all_valid_batch_not() -> None:
    td = _batch((3, 5), 0)
    before = td.clone()
    pack_transitions(td, torch.ones(3, 5, dtype=torch.bool), 1)
    assert all(torch.equal(td.get(k), before.get(k)) for k in before.keys(True, True))
    assert bool(td.get(MASK_KEY).all())
    valid = torch.tensor([[True, False, True, True, False]] * 3)
    pack_transitions(td, valid, 1, keys=["action"])
    assert torch.equal(td.get("action"), _reference(before.get("action"), valid))
    assert torch.equal(td.get("observation"), before.get("observation"))  # not named: unmoved
