"""benchmarks/tools/paired_rounds.py: both collectors once per round, in turn; the table's ratios; bad names."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import shipped_script


@pytest.fixture(scope="module")
def rounds():
    with shipped_script("paired_rounds") as module:
        yield module


def test_one_round_runs_both_collectors_and_leaves_no_actors(rounds, ray_clean):
    rec = rounds.Recorder()
    rounds.measure_rounds(rec, "next_step_index", 1, frames=1, timeout_s=240.0, warmup=0)
    assert [(m.impl, m.config, m.metric, m.note) for m in rec.measurements] == [
        (impl, "round 0", metric, "")
        for impl in ("tdscheme", rounds.HAND) for metric in ("first_batch_s", "frames_per_s")
    ]  # fmt: skip
    assert all(m.value > 0 for m in rec.measurements)


def test_warm_up_rounds_come_first_and_each_round_turns_the_order(rounds, monkeypatch):
    """The order of the sides (no collector built: each measurement only recorded)."""
    measured = []
    monkeypatch.setattr(rounds.collection_runs, "measure",
                        lambda rec, settings, row, make: measured.append((row["config"], row["impl"])))  # fmt: skip
    rounds.measure_rounds(rounds.Recorder(), "next_step_index", 2, frames=1, timeout_s=1.0)
    hand = rounds.HAND
    assert measured == [("warm-up 0", hand), ("warm-up 0", "tdscheme"), ("round 0", "tdscheme"),
                        ("round 0", hand), ("round 1", hand), ("round 1", "tdscheme")]  # fmt: skip


def test_the_table_pairs_each_round(rounds):
    def m(impl, r, value):
        return rounds.Measurement(section="pixels", impl=impl, env="e", order="first-ready",
                                  metric="frames_per_s", value=value, unit="frames/s",
                                  config=f"round {r}")  # fmt: skip

    # round 2's hand-written row failed: the round is left out, not paired with another's;
    # the warm-up round is no round of the table
    warm = [rounds.Measurement(**{**vars(m(impl, 0, 1.0)), "config": "warm-up 0"})
            for impl in ("tdscheme", rounds.HAND)]  # fmt: skip
    ms = [*warm, m("tdscheme", 0, 90.0), m(rounds.HAND, 0, 100.0), m(rounds.HAND, 1, 50.0),
          m("tdscheme", 1, 60.0), m("tdscheme", 2, 10.0), m(rounds.HAND, 2, None)]  # fmt: skip
    header, row = rounds.summary(ms)["paired rounds"]
    cells = dict(zip(header, row, strict=True))
    assert cells["rounds"] == "2"
    assert cells["per-round ratios"] == "0.900x, 1.200x"
    assert cells["median ratio"] == "1.050x" and cells["min ratio"] == "0.900x"
    assert cells["ratio of medians"] == f"{75.0 / 75.0:.3f}x"


def test_an_unknown_workload_is_named(rounds, capsys):
    with pytest.raises(SystemExit):
        rounds.main(["--workloads", "pixles"])
    assert "pixles" in capsys.readouterr().err
    with pytest.raises(ValueError, match="workload='pixles'"):
        rounds.workload("pixles")
