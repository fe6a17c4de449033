"""The first command a user tries with learner groups: a preset and `--num-learners 2`, nothing else.

On this 2-core machine the ranks and the collectors ask for more CPUs than Ray has;
the run shares them (one warning), says it trained on 2 ranks and reaches the preset's
target (sac-pendulum: with its buffer in Ray, said once, as each rank samples it).
Subprocesses, as a user runs them, joining the session's Ray (slow: learning).
"""

from __future__ import annotations

import pytest

from tests.cli.test_cli import join_session, run, summary_of


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("name", "target"),
    [("ppo-cartpole", 475.0), ("appo-cartpole", 475.0), ("sac-pendulum", -200.0)],
)
def test_a_preset_with_two_learner_ranks_reaches_its_target(ray_clean, tmp_path, name, target):
    out = run(["train", name, "--num-learners", "2", "--run-dir", str(tmp_path / "run"),
               *join_session(ray_clean)], timeout=840)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    summary = summary_of(out.stdout)
    assert summary["target_return"] == target and summary["target_reached"], summary
    assert "trained on 2 learner ranks" in out.stdout
    assert "each takes" in out.stderr  # the CPUs shared, said once
