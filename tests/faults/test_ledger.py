"""The frame ledger's parts, in-process.

The ledger's balance under each fault is checked where the fault is injected:
tests/faults/test_liveness.py (a hung worker, an elastic retirement after crashes, stacked and
first-ready total_frames exact) and tests/collectors (a killed worker, preemption, stale drops,
a worker killed while writing into a Ray-held buffer).
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdscheme.collectors.ledger import FrameLedger, TrajectoryIds, cut_to_fit
from tdscheme.keys import MASK_KEY


def test_cut_to_fit_keeps_whole_steps_and_counts_valid_frames():
    td = TensorDict({"x": torch.arange(12).view(2, 6)}, batch_size=[2, 6])
    td.set(MASK_KEY, torch.tensor([[True] * 6, [True] * 3 + [False] * 3]))
    cut, kept = cut_to_fit(td, 7, stacked=True)
    assert cut.batch_size == torch.Size([2, 4]) and kept == [4, 3]
    assert cut_to_fit(td, 9, stacked=True)[1] is None  # 9 valid frames fit


def test_ledger_columns_and_traj_ids_after_a_restart():
    ledger = FrameLedger()
    ledger.add(yielded=30, preempted=10)
    ledger.add(lost=40)
    assert ledger.as_dict()["collected"] == 80 and ledger.balanced()
    with pytest.raises(KeyError):
        ledger.add(spilled=1)
    ids = TrajectoryIds()
    key = ("collector", "traj_ids")
    old = TensorDict({key: torch.tensor([3, 4, 4])}, batch_size=[3])
    new = TensorDict({key: torch.tensor([0, 0, -1])}, batch_size=[3])
    ids.shift_(old, 1, 0)
    assert ids.shift_(new, 1, 1)[key].tolist() == [5, 5, -1]
