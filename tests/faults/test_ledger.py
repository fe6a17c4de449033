"""The frame ledger balances under faults, and total_frames is exact."""

from __future__ import annotations

import pytest
import ray
import torch
from tensordict import TensorDict

from tdscheme import RayCollector
from tdscheme.collectors.ledger import FrameLedger, TrajectoryIds, cut_to_fit
from tdscheme.keys import MASK_KEY
from tdscheme.testing import make_env

PARTS = ("yielded", "dropped", "preempted", "lost", "discarded")


def assert_balanced(ledger: dict, *, yielded: int) -> None:
    assert ledger["collected"] == sum(ledger[p] for p in PARTS), ledger
    assert ledger["balanced"] and ledger["unaccounted"] == 0, ledger
    assert ledger["yielded"] == yielded, ledger


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


@pytest.mark.timeout(150)
def test_stacked_total_frames_is_exact_and_the_ledger_balances_after_a_kill(ray_clean):
    seen = 0
    with RayCollector(
        make_env, frames_per_batch=40, total_frames=300, num_collectors=2, sync=True, seed=0
    ) as collector:
        for i, batch in enumerate(collector):
            seen += batch.numel()
            assert_balanced(collector.stats(timeout_s=5)["ledger"], yielded=seen)
            if i == 1:
                ray.kill(collector.workers[1], no_restart=True)
        stats = collector.stats(timeout_s=5)
    assert seen == 300 and stats["frames"] == 300  # 8 batches of 40 would give 320
    assert stats["restarts"] == 1 and stats["ledger"]["lost"] >= 20
    assert_balanced(stats["ledger"], yielded=300)
