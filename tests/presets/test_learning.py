"""Learning check (slow): ppo-cartpole clearly beats the random policy (return ~22), with each backend."""

from __future__ import annotations

import pytest

from tdscheme.engine import read_metrics
from tdscheme.presets import get_preset


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["gymnasium", "envpool"])
def test_ppo_cartpole_beats_random(ray_clean, tmp_path, backend):
    if backend == "envpool":  # EnvPool once collected fine but gave broken observations
        pytest.importorskip("envpool", reason="EnvPool is not installed (tdscheme[envpool])")
    preset = get_preset("ppo-cartpole").override(
        {
            "env_backend": backend,
            "collector_resources": {"num_cpus": 0.5},
            "target_return": 200.0,  # random: ~22; the preset's own target is 475
            "total_frames": 100_000,
            "run_dir": str(tmp_path),
            "progress": False,
        }
    )
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    assert summary["target_reached"], summary
    eval_returns = [value for _, value in read_metrics(tmp_path)["eval/return"]]
    assert eval_returns[-1] == summary["eval_return"] >= 200.0
