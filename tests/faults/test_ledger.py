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

import random
import types

import pytest
import torch
from tensordict import TensorDict

from tdscheme.collectors.driver.budget import FrameBudget, cut_to_fit, cut_trajectories
from tdscheme.collectors.driver.ledger import FrameLedger, TrajectoryIds
from tdscheme.keys import MASK_KEY


def test_cut_to_fit_keeps_whole_steps_and_counts_valid_frames():
    td = TensorDict({"x": torch.arange(12).view(2, 6)}, batch_size=[2, 6])
    td.set(MASK_KEY, torch.tensor([[True] * 6, [True] * 3 + [False] * 3]))
    cut, kept = cut_to_fit(td, 7, stacked=True)
    assert cut.batch_size == torch.Size([2, 4]) and kept == [4, 3]
    assert cut_to_fit(td, 9, stacked=True)[1] is None  # 9 valid frames fit


def test_cut_trajectories_keeps_whole_trajectories_in_order():
    """[2 workers, 2 trajectories, 4 steps]: lengths 4, 2 | 3, 1; 7 frames keep the first two."""
    lengths = torch.tensor([[4, 2], [3, 1]])
    mask = torch.arange(4) < lengths.unsqueeze(-1)
    td = TensorDict({"x": torch.ones(2, 2, 4)}, batch_size=[2, 2, 4]).masked_fill(~mask, 0)
    td.set(MASK_KEY, mask)
    cut, kept = cut_trajectories(td, 7, stacked=True)
    assert kept == [6, 0] and cut.batch_size == td.batch_size
    assert cut[MASK_KEY].sum(-1).tolist() == [[4, 2], [0, 0]]
    assert cut["x"].sum().item() == 6  # the dropped trajectories are zeroed, like padding
    assert cut_trajectories(td, 10, stacked=True)[1] is None
    rows, kept = cut_trajectories(td[1], 3)  # one worker's batch: whole rows kept
    assert rows.batch_size == torch.Size([1, 4]) and kept == [3]


def test_ledger_books_each_request_when_asked_and_when_resolved():
    ledger = FrameLedger()
    ledger.ask("a", 40, worker_id=0, batch_id=1)
    ledger.ask("b", 40, worker_id=1, batch_id=1)
    ledger.resolve("a", yielded=30, preempted=10)
    assert ledger.as_dict() == {
        "asked": 80, "in_flight": 40, "collected": 40, "yielded": 30, "dropped": 0,
        "preempted": 10, "lost": 0, "discarded": 0, "reset_steps": 0, "held_back": 0, "unaccounted": 0,
        "short": 0,
        "short_reason": None, "balanced": True,
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


def _whole_trajectory_run(total: int, lengths: list[int], workers: int = 2) -> FrameLedger:
    """Drives a FrameBudget as the flow does, with workers writing 2 whole trajectories each.

    Each request is resolved in the order sent; a worker writes the longest prefix of
    its trajectories that fits the request's budget and discards the rest.
    """
    config = types.SimpleNamespace(total_frames=total, replay_buffer=object(), trajs_per_batch=2)
    ledger = FrameLedger()
    budget = FrameBudget(config, ledger)
    trajectories = iter(lengths)
    in_flight: list[tuple[int, int]] = []  # (key, budget)
    for key in range(1_000):
        while len(in_flight) < workers and budget.wanted(sum(b for _, b in in_flight)):
            bound = budget.for_request(100, promised=sum(b for _, b in in_flight), workers=workers)
            ledger.ask(key := key + 10_000, min(100, bound))
            in_flight.append((key, bound))
        if not in_flight:
            budget.check_end(stopped=False)
            return ledger
        key, bound = in_flight.pop(0)
        collected = [next(trajectories), next(trajectories)]
        written = collected[0] if collected[0] <= bound else 0
        written = sum(collected) if sum(collected) <= bound else written
        if written < sum(collected):
            budget.reply_short(bound, 100, written=written)
        ledger.resolve(
            key, asked=sum(collected), yielded=written, discarded=sum(collected) - written
        )
    raise AssertionError("the run of whole trajectories never ended")


@pytest.mark.parametrize("seed", range(5))
def test_whole_trajectories_end_within_one_trajectory_of_total_frames(seed):
    """Shares that fit no trajectory end in one request at a time with all that is left.

    Before, each in-flight request got half of what was left after the others' promises,
    so with 200-step trajectories the shares shrank under one trajectory and the run
    asked (and discarded) forever.
    """
    rng = random.Random(seed)
    fixed = seed == 0  # Pendulum: every trajectory is 200 steps
    lengths = [200 if fixed else rng.randint(20, 200) for _ in range(10_000)]
    ledger = _whole_trajectory_run(3000, lengths)
    assert ledger.balanced(), ledger.as_dict()
    assert 3000 - 200 < ledger.yielded <= 3000, ledger.as_dict()
    if fixed:
        assert ledger.yielded == 3000
    else:
        assert ledger.short == 3000 - ledger.yielded
        assert ledger.short == 0 or "whole trajectory" in ledger.short_reason


def test_an_iteration_that_ends_short_with_no_reason_is_an_error_and_unbalanced():
    config = types.SimpleNamespace(total_frames=3000, replay_buffer=object(), trajs_per_batch=None)
    ledger = FrameLedger()
    ledger.ask("a", 2125)
    ledger.resolve("a", yielded=2125)
    budget = FrameBudget(config, ledger)
    budget.check_end(stopped=True)  # stopped by the user: not an early stop
    assert ledger.balanced()
    with pytest.raises(RuntimeError, match=r"ended at 2125 of total_frames=3000.*875 frames"):
        budget.check_end(stopped=False)
    assert not ledger.balanced() and ledger.as_dict()["short"] == 875
    budget.close("a request's budget of 20 frames holds no more whole env rows")
    budget.check_end(stopped=False)  # short for a reason: balanced
    assert ledger.balanced() and "env rows" in ledger.as_dict()["short_reason"]
