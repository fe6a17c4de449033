"""benchmarks/tools/worker_parity.py: both workers collect in turn in this process; bad workload names are named."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import load_script, scripts_on_path


@pytest.fixture(scope="module")
def parity():
    with scripts_on_path():  # the script imports its neighbours by their names
        yield load_script("worker_parity")


def test_one_batch_each_in_turn(parity, tmp_path, capsys):
    out = tmp_path / "section.md"
    assert parity.main(["--workloads", "native_index", "--batches", "2", "--out", str(out)]) == 0
    row = parity.measure("native_index", 1)
    assert row["tdscheme_ms"] > 0 and row["hand_ms"] > 0 and row["ratio_of_medians"] > 0
    assert "| native_index | 4,096 | 2 |" in out.read_text()


def test_against_the_hand_written_tdscheme_batch(parity):
    row = parity.measure("native_layout", 1)  # TdschemeLayoutWorker as the hand-written side
    assert row["workload"] == "native_layout" and row["hand_ms"] > 0 and row["tdscheme_ms"] > 0


def test_an_unknown_workload_is_named(parity):
    with pytest.raises(SystemExit):
        parity.main(["--workloads", "natve"])
