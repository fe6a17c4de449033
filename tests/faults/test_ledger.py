"""The frame ledger's parts, in-process.

The ledger's balance under each fault is checked where the fault is injected:
tests/faults/test_liveness.py (a hung worker, stacked and first-ready; an elastic retirement
after crashes) and tests/collectors (a killed worker, preemption, stale drops, torchrl's
rounding to whole env steps, a worker killed while writing into a Ray-held buffer, whole
trajectories), where the ledger's requests in flight are also held against the flow's own
record. Beyond those, every test fails on an imbalance its collectors met (the
``ledger_imbalances`` fixture in tests/conftest.py).
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdscheme.collectors.driver.budget import cut_to_fit
from tdscheme.collectors.driver.ledger import FrameLedger, TrajectoryIds
from tdscheme.keys import MASK_KEY


def test_cut_to_fit_keeps_whole_steps_and_counts_valid_frames():
    td = TensorDict({"x": torch.arange(12).view(2, 6)}, batch_size=[2, 6])
    td.set(MASK_KEY, torch.tensor([[True] * 6, [True] * 3 + [False] * 3]))
    cut, kept = cut_to_fit(td, 7, stacked=True)
    assert cut.batch_size == torch.Size([2, 4]) and kept == [4, 3]
    assert cut_to_fit(td, 9, stacked=True)[1] is None  # 9 valid frames fit


def test_ledger_books_each_request_when_asked_and_when_resolved():
    ledger = FrameLedger()
    ledger.ask("a", 40, worker_id=0, batch_id=1)
    ledger.ask("b", 40, worker_id=1, batch_id=1)
    ledger.resolve("a", yielded=30, preempted=10)
    assert ledger.as_dict() == {
        "asked": 80, "in_flight": 40, "collected": 40, "yielded": 30, "dropped": 0,
        "preempted": 10, "lost": 0, "discarded": 0, "unaccounted": 0, "balanced": True,
    }  # fmt: skip
    assert ledger.requests_in_flight() == {"b": 40}
    ledger.resolve("b", lost=40)
    assert ledger.as_dict()["collected"] == 80 and ledger.in_flight == 0 and ledger.balanced()
    with pytest.raises(KeyError, match="spilled"):
        ledger.resolve("c", spilled=1)
    # whole trajectories: the nominal ask is restated to what the worker stepped
    ledger.ask("t", 40, worker_id=0, batch_id=2)
    ledger.resolve("t", asked=57, yielded=50, discarded=7)
    assert ledger.as_dict()["asked"] == 137 and ledger.balanced()
    # a restored run starts over at its frames, the requests in flight kept
    ledger.ask("d", 40, worker_id=0, batch_id=3)
    ledger.reset_(yielded=500)
    ledger.resolve("d", yielded=40)
    assert ledger.as_dict()["asked"] == ledger.yielded == 540 and ledger.balanced()


@pytest.mark.parametrize(
    ("mistake", "unaccounted"),
    [
        ("columns short of the ask", 10),
        ("columns past the ask", 5),
        ("resolved twice", 40),
        ("never resolved", 40),
        ("asked twice", 40),
        ("restated short", 3),
    ],
)
def test_a_resolution_that_does_not_add_up_unbalances_the_ledger(
    mistake, unaccounted, ledger_imbalances
):
    ledger = FrameLedger()
    ledger.ask("a", 40, worker_id=3, batch_id=7)
    if mistake == "columns short of the ask":
        ledger.resolve("a", yielded=20, discarded=10)
    elif mistake == "columns past the ask":
        ledger.resolve("a", yielded=40, preempted=5)
    elif mistake == "resolved twice":
        ledger.resolve("a", lost=40)
        ledger.resolve("a", lost=40, worker_id=3, batch_id=7)
    elif mistake == "never resolved":
        ledger.settle()
    elif mistake == "asked twice":
        ledger.ask("a", 40, worker_id=3, batch_id=7)
        ledger.resolve("a", yielded=40)
    else:  # a batch of whole trajectories whose columns miss what its worker stepped
        ledger.resolve("a", asked=60, yielded=50, discarded=7)
    out = ledger.as_dict()
    assert out["unaccounted"] == unaccounted and not out["balanced"] and not ledger.balanced()
    assert out["in_flight"] == 0
    assert len(ledger_imbalances) == 1 and "worker 3 batch 7" in ledger_imbalances[0].getMessage()
    ledger_imbalances.clear()  # caused on purpose


def test_traj_ids_after_a_restart():
    ids = TrajectoryIds()
    key = ("collector", "traj_ids")
    old = TensorDict({key: torch.tensor([3, 4, 4])}, batch_size=[3])
    new = TensorDict({key: torch.tensor([0, 0, -1])}, batch_size=[3])
    ids.shift_(old, 1, 0)
    assert ids.shift_(new, 1, 1)[key].tolist() == [5, 5, -1]
