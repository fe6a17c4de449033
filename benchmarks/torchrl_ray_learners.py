"""tdscheme's learner groups against torchrl's Ray DDP learners: SAC on Pendulum-v1, 2 ranks each.

torchrl 0.14.1's ``SACTrainer(learner_backend="ray")`` (its own ``_RayTrainerExecution``:
2 learner actors, one gloo DDP group, each sampling its half of every minibatch from a
Ray-owned replay buffer) and ``tdscheme train sac-pendulum --buffer-location ray
--num-learners 2`` (a :class:`~tdscheme.learner.LearnerGroup` whose ranks sample a Ray-held
buffer), run one after the other, each in its own process with its own local Ray
(``num_cpus=2``, no dashboard) and a timeout. Both take sac-pendulum's settings: the same
networks (built by the same function), SAC loss, Adam learning rate, soft target rate,
total minibatch (half per rank), collectors (2 x 4 Pendulum envs, 256 frames per batch,
half a CPU each, half a CPU per learner rank), gradient steps per frame, random frames
first, and the same evaluation (tdscheme's ``evaluate``: the deterministic policy, 10
episodes on 10 envs, every 2,048 frames, stop at -200).

The two figures: the updates' samples per second (minibatch frames x gradient steps /
seconds inside the learner call, on the driver, the first call left out as warm-up;
torchrl: ``backend.step``, tdscheme: ``time/learn_s``) and the agent frames at the first
evaluation whose mean return reaches -200.

Run from the repository root::

    .venv/bin/python benchmarks/torchrl_ray_learners.py --out benchmarks/results/torchrl_ray_learners.md
    .venv/bin/python benchmarks/torchrl_ray_learners.py --smoke     # a tiny run: it works
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import fresh_ray_env, json_line, tdscheme_executable
from report import machine_info, print_tables, write_markdown

RANK = {"num_cpus": 0.5}
PEERS = ("torchrl", "tdscheme")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """sac-pendulum's settings, the one source of both runs' (``--smoke``: tiny counts)."""
    from tdscheme.presets import get_preset

    p = get_preset("sac-pendulum")
    a, s, t = p.algo, p.scheme, p.trainer
    out = {
        "env_id": a.env_id, "num_envs": a.num_envs, "hidden_sizes": list(a.hidden_sizes),
        "lr": a.lr, "gamma": a.gamma, "tau": a.tau, "batch_size": a.batch_size,
        "buffer_size": a.buffer_size, "num_collectors": s.num_collectors,
        "frames_per_batch": s.frames_per_batch, "utd_ratio": s.utd_ratio,
        "init_random_frames": s.init_random_frames, "frames": t.total_frames,
        "eval_every": t.eval_every_frames, "eval_episodes": t.eval_episodes,
        "eval_num_envs": a.eval_num_envs, "target": t.target_return, "seed": args.seed,
    }  # fmt: skip
    if args.smoke:
        out.update(frames=1024, init_random_frames=256, utd_ratio=0.125, eval_every=512,
                   eval_episodes=2, eval_num_envs=2)  # fmt: skip
    if args.frames:
        out["frames"] = args.frames
    return out


# -- torchrl's side, in its own process ---------------------------------------------------


def run_torchrl(s: dict[str, Any]) -> dict[str, Any]:
    """One SACTrainer(learner_backend="ray") run; its samples/s, evaluations and frames."""
    import ray
    import torch
    from torchrl.collectors.distributed import RayCollector
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.objectives import SACLoss, SoftUpdate
    from torchrl.trainers.algorithms import SACTrainer

    from tdscheme.engine.evaluation import evaluate
    from tdscheme.envs import make_env
    from tdscheme.presets.offpolicy_modules import offpolicy_modules

    torch.set_num_threads(1)
    ray_config = {"address": "local", "num_cpus": 2, "include_dashboard": False,
                  "log_to_driver": False}  # fmt: skip
    ray.init(**ray_config)
    modules = functools.partial(offpolicy_modules, s["env_id"], algo="sac",
                                hidden_sizes=tuple(s["hidden_sizes"]))  # fmt: skip
    torch.manual_seed(s["seed"])
    nets = modules()
    loss = SACLoss(nets["actor"], nets["qvalue"], num_qvalue_nets=2,
                   action_spec=nets["actor"].spec)  # fmt: skip
    loss.make_value_estimator(gamma=s["gamma"])
    # a plain ReplayBuffer fails in the learners: the Ray client answers hasattr(..,
    # 'update_tensordict_priority') True, and the actor has no such method
    replay = TensorDictReplayBuffer(
        storage=functools.partial(LazyTensorStorage, s["buffer_size"]),
        batch_size=s["batch_size"], service_backend="ray",
        service_backend_options={"ray_init_config": ray_config,
                                 "remote_config": {"num_cpus": 0}},
    )  # fmt: skip
    make = functools.partial(make_env, s["env_id"], num_envs=s["num_envs"])
    collector = RayCollector(
        [make] * s["num_collectors"], nets["actor"], collector_class="single",
        frames_per_batch=s["frames_per_batch"], total_frames=s["frames"],
        init_random_frames=s["init_random_frames"], sync=True,
        ray_init_config=ray_config, remote_configs={"num_cpus": 0.5},
    )  # fmt: skip
    trainer = SACTrainer(
        collector=collector, total_frames=s["frames"], frame_skip=1,
        optim_steps_per_batch=max(1, round(s["frames_per_batch"] * s["utd_ratio"])),
        loss_module=loss, optimizer=torch.optim.Adam(loss.parameters(), lr=s["lr"]),
        replay_buffer=replay, batch_size=s["batch_size"],
        target_net_updater=SoftUpdate(loss, tau=s["tau"]), clip_grad_norm=False,
        learner_backend="ray",
        learner_backend_options={"world_size": 2, "resources_per_rank": dict(RANK),
                                 "setup_timeout": 300.0, "command_timeout": 900.0},
        seed=s["seed"], progress_bar=False, enable_logging=False,
        save_trainer_interval=10**12, log_interval=10**12,
    )  # fmt: skip
    # torchrl has no public hook around the learners' step nor a public read of their
    # weights: the backend's own step is timed, and its get_weights feeds the evaluation.
    backend = trainer._execution_backend
    calls: list[tuple[int, float]] = []
    step = backend.step

    def timed_step(num_steps: int):
        start = time.perf_counter()
        receipt = step(num_steps)
        calls.append((num_steps, time.perf_counter() - start))
        return receipt

    backend.step = timed_step
    eval_env = make_env(s["env_id"], num_envs=s["eval_num_envs"])
    eval_actor = modules()["actor"]
    evals: list[tuple[int, float]] = []
    state = {"next": s["eval_every"], "target_frames": None}
    started = time.perf_counter()

    def maybe_evaluate() -> None:
        frames = int(trainer.collected_frames)
        if frames < state["next"] or not calls:
            return
        while state["next"] <= frames:
            state["next"] += s["eval_every"]
        backend.get_weights("policy").to_module(eval_actor)
        ret = evaluate(eval_env, eval_actor, episodes=s["eval_episodes"]).mean_return
        evals.append((frames, ret))
        print(f"[torchrl] {frames} frames: eval return {ret:.1f}", file=sys.stderr, flush=True)
        if s["target"] is not None and ret >= s["target"]:
            state["target_frames"] = frames
            trainer.request_stop(f"eval return {ret:.1f} >= {s['target']}")

    trainer.register_op("post_steps", maybe_evaluate)
    try:
        trainer.train()
    finally:
        collector.shutdown()
        replay.shutdown()
        eval_env.close()
        ray.shutdown()
    timed = calls[1:]
    steps = sum(n for n, _ in timed)
    seconds = sum(sec for _, sec in timed)
    return {
        "samples_s": s["batch_size"] * steps / seconds if seconds else None,
        "timed_steps": steps, "learn_s": seconds, "gradient_steps": sum(n for n, _ in calls),
        "frames": int(trainer.collected_frames), "target_frames": state["target_frames"],
        "evals": evals, "train_s": time.perf_counter() - started,
    }  # fmt: skip


# -- tdscheme's side: the command ---------------------------------------------------------


def tdscheme_command(s: dict[str, Any], run_dir: Path) -> list[str]:
    """``tdscheme train sac-pendulum`` with a Ray-held buffer, 2 ranks and ``s``'s settings."""
    target = "none" if s["target"] is None else str(s["target"])
    return [
        tdscheme_executable(), "train", "sac-pendulum", "--buffer-location", "ray",
        "--num-learners", "2", "--learner-resources", json.dumps(RANK),
        "--collector-resources", json.dumps({"num_cpus": 0.5}),
        "--env-id", s["env_id"], "--num-envs", str(s["num_envs"]),
        "--hidden-sizes", ",".join(map(str, s["hidden_sizes"])), "--lr", str(s["lr"]),
        "--gamma", str(s["gamma"]), "--tau", str(s["tau"]),
        "--batch-size", str(s["batch_size"]), "--buffer-size", str(s["buffer_size"]),
        "--num-collectors", str(s["num_collectors"]),
        "--frames-per-batch", str(s["frames_per_batch"]), "--utd-ratio", str(s["utd_ratio"]),
        "--init-random-frames", str(s["init_random_frames"]),
        "--total-frames", str(s["frames"]), "--eval-every-frames", str(s["eval_every"]),
        "--eval-episodes", str(s["eval_episodes"]), "--eval-num-envs", str(s["eval_num_envs"]),
        "--target-return", target, "--seed", str(s["seed"]), "--run-dir", str(run_dir),
        "--checkpoint-every-frames", "0", "--no-checkpoint-at-end", "--progress", "false",
        "--num-threads", "1",
        "--ray-init-config", json.dumps({"num_cpus": 2, "include_dashboard": False}),
    ]  # fmt: skip


def tdscheme_result(stdout: str, run_dir: Path, batch_size: int, wall_s: float) -> dict[str, Any]:
    """The run's samples/s (``time/learn_s`` per step, the first one with updates left out)."""
    from tdscheme.engine.run_log import read_metrics

    summary = json.loads(stdout.split("summary: ", 1)[1].splitlines()[0])
    metrics = read_metrics(run_dir)
    learn = dict(metrics.get("time/learn_s", []))
    steps = [(frames, n) for frames, n in metrics.get("replay/updates_per_step", []) if n > 0]
    timed = [(n, learn[frames]) for frames, n in steps[1:] if frames in learn]
    updates = sum(n for n, _ in timed)
    seconds = sum(sec for _, sec in timed)
    return {
        "samples_s": batch_size * updates / seconds if seconds else None,
        "timed_steps": int(updates), "learn_s": seconds,
        "gradient_steps": int(sum(n for _, n in steps)), "frames": summary["frames"],
        "target_frames": summary["target_frames"] if summary["target_reached"] else None,
        "evals": [(int(f), r) for f, r in metrics.get("eval/return", [])], "wall_s": wall_s,
    }  # fmt: skip


# -- the driver ---------------------------------------------------------------------------


def run_child(command: list[str], timeout_s: float, ray_tmp: str) -> tuple[str, float]:
    """Runs ``command`` in its own session (Ray's processes included), killed past ``timeout_s``."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=fresh_ray_env(ray_tmp), start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}:\n{err[-3000:]}")
    return out, time.perf_counter() - start


def measure(peer: str, s: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One peer's run in its own process: its result, or the error that stopped it."""
    with tempfile.TemporaryDirectory(prefix="trl_", dir="/tmp") as tmp:
        run_dir = Path(tmp) / "run"
        if peer == "torchrl":
            command = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(s)]
        else:
            command = tdscheme_command(s, run_dir)
        try:
            out, wall_s = run_child(command, timeout_s, tmp)
            if peer == "torchrl":
                result = json.loads(out.split("result: ", 1)[1].splitlines()[0])
                result["wall_s"] = wall_s
            else:
                result = tdscheme_result(out, run_dir, s["batch_size"], wall_s)
            result["error"] = None
        except (RuntimeError, subprocess.TimeoutExpired, IndexError, ValueError) as err:
            result = {"error": str(err).strip().splitlines()[-1][:300]}
    return {"peer": peer, **result}


def table(rows: list[dict[str, Any]], s: dict[str, Any]) -> list[list[str]]:
    """The side-by-side rows."""
    head = ["learners", "samples/s (updates, after warm-up)", "gradient steps timed",
            f"frames to {s['target']}", "last eval return", "process s", "status"]  # fmt: skip
    out = [head]
    names = {"torchrl": "torchrl SACTrainer(learner_backend='ray'), 2 DDP ranks",
             "tdscheme": "tdscheme LearnerGroup, 2 ranks (--buffer-location ray)"}  # fmt: skip
    for r in rows:
        if r["error"]:
            out.append([names[r["peer"]], "-", "-", "-", "-", "-", f"failed: {r['error']}"])
            continue
        rate = "-" if r["samples_s"] is None else f"{r['samples_s']:.0f}"
        reached = r["target_frames"]
        frames = f"{reached}" if reached is not None else f"not reached in {r['frames']}"
        last = f"{r['evals'][-1][1]:.1f}" if r["evals"] else "-"
        out.append([names[r["peer"]], rate, str(r["timed_steps"]), frames, last,
                    f"{r['wall_s']:.0f}", "ok"])  # fmt: skip
    return out


INTRO = """\
SAC on Pendulum-v1, 2 learner ranks each (half a CPU per rank, gloo), sac-pendulum's
settings for both: 64x64 ReLU networks built by the same function, torchrl's SACLoss (two
Q-networks, learned temperature), one Adam, soft targets, no gradient clipping, the same
total minibatch (half per rank, each rank sampling its half from the Ray-held buffer),
2 collectors of 4 envs, the same gradient steps per frame after the random frames, and
the same evaluation on the driver (tdscheme's `evaluate`: deterministic policy,
`eval_episodes` on `eval_num_envs` envs, every `eval_every` frames, stop at the target;
torchrl's rank-0 weights fetched for it). Samples/s: minibatch frames x gradient steps /
seconds inside the learner call seen from the driver (torchrl: its backend's `step`,
tdscheme: `time/learn_s`), the first call left out; evaluation is outside it in both.

Not matched: torchrl's collectors run in lockstep with the learners (collect 256 frames,
train, publish weights, repeat) and its driver extends the Ray buffer with each batch
(its Trainer counts frames by the buffer's `write_count`, which counts rows, not frames,
when workers write [envs, time] batches themselves); tdscheme's workers write into the
buffer in the background while the ranks train. torchrl's buffer must be a
TensorDictReplayBuffer, and its ranks send each sampled minibatch back to the buffer
actor (`update_tensordict_priority`, on by default, not switchable from SACTrainer);
they seed torch with seed + rank and average gradients by DDP over equal shards
(tdscheme: by frame count). torchrl takes a whole batch of steps at the first batch past
the random frames; tdscheme counts steps from the frames past them.
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=None, help="frames per run (default 50k)")
    parser.add_argument("--smoke", action="store_true", help="a tiny run of each: it works")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peers", default=",".join(PEERS), help="torchrl,tdscheme")
    parser.add_argument("--timeout-s", type=float, default=None, help="per run")
    parser.add_argument("--out", default=None, help="also write the markdown to this path")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # torchrl's run, in this child process
        print("result: " + json.dumps(run_torchrl(json.loads(args.child))), flush=True)
        return 0
    s = settings(args)
    timeout_s = args.timeout_s or (600.0 if args.smoke else max(1800.0, 0.15 * s["frames"]))
    started = time.perf_counter()
    machine = machine_info()
    json_line({"machine": machine, "settings": s})
    rows = []
    for peer in [p for p in args.peers.split(",") if p]:
        if peer not in PEERS:
            parser.error(f"--peers: unknown {peer!r}; accepted: {','.join(PEERS)}")
        rows.append(measure(peer, s, timeout_s))
        json_line({**rows[-1], "settings": s})
    seconds = time.perf_counter() - started
    tables = {f"SAC on {s['env_id']}, 2 learner ranks, minibatch {s['batch_size']}": table(rows, s)}
    print_tables(tables)
    if args.out:
        intro = INTRO + f"\nSettings: `{json.dumps(s)}`; per-run timeout {timeout_s:.0f} s."
        write_markdown(args.out, title="tdscheme learner groups vs torchrl's Ray learners",
                       script="torchrl_ray_learners.py", argv=argv, seconds=seconds,
                       machine=machine, intro=intro, tables=tables)  # fmt: skip
        print(f"wrote {args.out}", flush=True)
    return 0 if all(r["error"] is None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
