"""Your own curriculum: MountainCar's engine weakened each time the car reaches the flag often enough.

With MountainCar-v0's own engine (force 0.001) a random policy never reaches the flag, so PPO
never sees a reward worth learning from. Start the training cars ten times stronger and
weaken the engine as the agent masters each force: the Trainer hands the curriculum the
episodes that ended lately (their returns and the env-config version each ran), and a config
it returns is pushed to the running workers (each env copy takes it at its next reset; no
actor is rebuilt). Evaluation runs MountainCar-v0 as registered throughout. `state_dict` /
`load_state_dict` keep the curriculum's level in checkpoints, so `--resume` goes on from it.

Run: python examples/curriculum_mountaincar.py   (MountainCar-v0 at -110 in about 50 s here)
"""

from __future__ import annotations

import argparse
import tempfile

from tdscheme import Trainer
from tdscheme.presets import get_preset

#: engine forces, strongest first; MountainCar-v0's own is the last
FORCES = (0.01, 0.005, 0.003, 0.002, 0.0015, 0.00125, 0.001)


class WeakerEngine:
    """The next, weaker engine once the mean return of the last ``episodes`` episodes run at
    the current one reaches ``promote_at``."""

    def __init__(self, promote_at: float = -150.0, episodes: int = 32):
        self.level, self.promote_at, self.episodes = 0, promote_at, episodes

    def initial_config(self) -> dict[str, float]:
        return {"force": FORCES[0]}

    def __call__(self, recent) -> dict[str, float] | None:
        ran = zip(recent.returns, recent.versions, strict=True)
        at_this_force = [r for r, version in ran if version == recent.version]
        if self.level == len(FORCES) - 1 or len(at_this_force) < self.episodes:
            return None
        if sum(at_this_force[-self.episodes :]) / self.episodes < self.promote_at:
            return None
        self.level += 1
        print(f"mastered: engine force now {FORCES[self.level]:g}")
        return {"force": FORCES[self.level]}

    def state_dict(self) -> dict[str, int]:
        return {"level": self.level}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.level = state["level"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total-frames", type=int, default=400_000)
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args()

    # ppo-mountaincar whose training envs take configs (its own curriculum replaced by ours)
    preset = get_preset("ppo-mountaincar-curriculum").override(
        {"total_frames": args.total_frames,
         "run_dir": args.run_dir or tempfile.mkdtemp(prefix="tdscheme-")}  # fmt: skip
    )
    curriculum = WeakerEngine()
    with Trainer(preset.build_scheme, config=preset.trainer, curriculum=curriculum) as trainer:
        summary = trainer.run()
    print(f"engine force at the end {FORCES[curriculum.level]:g}; eval return {summary['eval_return']} "
          f"(MountainCar-v0 as registered), target reached: {summary['target_reached']}")

if __name__ == "__main__":
    main()
