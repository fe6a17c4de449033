"""benchmarks/tools/cpu_per_batch.py: each side's CPU per batch by process; the table; bad names."""

from __future__ import annotations

import os

import pytest

from tests.benchmarks.scripts import shipped_script


@pytest.fixture(scope="module")
def cpu():
    with shipped_script("cpu_per_batch") as module:
        yield module


def test_each_side_is_measured_by_part_and_leaves_no_actors(cpu, ray_clean):
    rec = cpu.Recorder()
    for impl in ("tdscheme", cpu.paired_rounds.HAND):
        cpu.measure_once(rec, "next_step_index", impl, "round 0", seconds=0.1)
    values = {(m.impl, m.metric): m.value for m in rec.measurements}
    assert all(m.note == "" for m in rec.measurements)
    for impl in ("tdscheme", cpu.paired_rounds.HAND):
        assert values[impl, "frames_per_s"] > 0
        # the workers stepped the envs; the driver received the batches; idle is a share
        assert values[impl, "workers"] > 0 and values[impl, "driver"] > 0
        assert 0 <= values[impl, "idle"] <= 100
    header, *rows = cpu.summary(rec.measurements)["CPU per batch"]
    assert [r[1] for r in rows] == ["tdscheme", cpu.paired_rounds.HAND]
    assert rows[1][header.index("busy vs hand-written")] == "1.000x"


def test_cpu_is_split_by_process(cpu):
    before = {1: 1.0, 2: 2.0, 3: 0.5}
    after = {1: 1.5, 2: 2.25, 3: 1.5, 4: 0.125}  # 4 started in between; none ended
    parts = cpu.split_cpu(before, after, workers={1}, driver=2)
    assert parts == {"workers": 0.5, "driver": 0.25, "others": 1.125}


def test_the_own_process_is_read(cpu):
    assert os.getpid() in cpu.process_cpu()
    busy, idle = cpu.machine_cpu()
    assert busy > 0 and idle >= 0


def test_an_unknown_workload_is_named(cpu, capsys):
    with pytest.raises(SystemExit):
        cpu.main(["--workloads", "pixles"])
    assert "pixles" in capsys.readouterr().err
