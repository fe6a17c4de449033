"""Test mode: `tdscheme eval RUN_DIR` scores every checkpoint, in parallel, the same twice."""

from __future__ import annotations

import csv

from tdscheme.cli import main
from tdscheme.presets import get_preset


def read_scores(run_dir):
    with open(run_dir / "eval.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_every_checkpoint_scored_on_workers_equals_in_process_and_plots(
    ray_clean, tmp_path, capsys
):
    preset = get_preset("ppo-cartpole").override({
        "num_collectors": 1, "num_envs": 4, "frames_per_batch": 512, "minibatch_size": 256,
        "num_epochs": 1, "collector_resources": {"num_cpus": 0.5}, "run_dir": str(tmp_path),
        "progress": False, "target_return": None, "total_frames": 2560, "eval_at_end": False,
        "checkpoint_every_frames": 512, "keep_checkpoints": 5,
    })  # fmt: skip
    with preset.build_trainer() as trainer:
        trainer.run()
    args = ["eval", str(tmp_path), "--episodes", "2", "--seed", "3"]
    assert main([*args, "--eval-workers", "2"]) == 0
    on_workers = read_scores(tmp_path)
    out = capsys.readouterr().out
    assert "eval.csv" in out and (tmp_path / "eval_checkpoints.png").stat().st_size > 1000
    assert [int(r["frames"]) for r in on_workers] == [512, 1024, 1536, 2048, 2560]
    assert all(r["episodes"] == "2" for r in on_workers)

    assert main(args) == 0  # in this process: the same episodes, number for number
    assert read_scores(tmp_path) == on_workers

    capsys.readouterr()
    assert main([*args, "--checkpoint", "latest"]) == 0  # one checkpoint, no table
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("eval: ")]
    assert len(lines) == 1 and '"frames": 2560' in lines[0]
