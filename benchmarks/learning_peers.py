"""How ``benchmarks/learning.py`` runs its peers, SB3 (RL Zoo) and CleanRL, and what a run keeps.

* **Stable-Baselines3** with the RL Zoo's tuned hyperparameters, read at run time from the
  installed ``rl_zoo3`` (``rl_zoo3/hyperparams/<algo>.yml``) and turned into SB3 arguments and
  envs by the zoo's own ``ExperimentManager``, as ``python -m rl_zoo3.train`` does: ``lin_X``
  schedules, ``policy_kwargs`` strings, ``n_envs``, ``normalize``, ``frame_stack``,
  ``env_wrapper`` (the ``atari`` entry: ``AtariWrapper`` under ``make_vec_env``, then
  ``VecFrameStack(4)``, what ``make_atari_env`` builds). The entry is written under the id
  of the env that runs (the zoo's ``HalfCheetah-v4`` entry trains ``HalfCheetah-v5``).
  :class:`CurveRecorder` logs the training episodes (SB3's ``Monitor``, below the Atari
  wrappers: whole games) and evaluates as tdscheme's Trainer does, in a process of its own
  (``learning_peers.py sb3 SPEC.json``) writing its curve as it goes.
* **CleanRL**: ``cleanrl/<script>`` is read from a checkout given on the command line,
  adapted for gymnasium 1.x / EnvPool 1.2 / NumPy 2 by the textual replacements of
  :func:`cleanrl_replacements` in a temporary copy, and run; its stdout lines
  ``global_step=..., episodic_return=...`` are its curve. Nothing of CleanRL is kept in this
  repository beyond the lines the replacements look for.

Only the standard library is imported at import time: SB3 and the zoo when a run needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CLEANRL_NAME = "CleanRL ppo_atari_envpool"


# -- what a run keeps, and how it runs -------------------------------------------------------


@dataclasses.dataclass
class RunRecord:
    """One run's curves and how it was made, kept as ``<data_dir>/<task>/<name>_seed<S>.json``.

    ``eval`` rows are ``[agent_steps, wall_s, mean_return]``; ``train`` rows are
    ``[agent_steps, wall_s, mean_return, episodes]`` (tdscheme logs one mean per batch, the
    peers one row per episode). ``outcome`` is ``"ok"``, ``"failed"`` or ``"timeout"``.
    """

    task: str
    framework: str
    seed: int
    budget_steps: int
    outcome: str
    failure: str | None
    exit_s: float
    command: list[str]
    settings: dict[str, Any]
    eval: list[list[Any]]
    train: list[list[Any]]
    machine: dict[str, Any] = dataclasses.field(default_factory=dict)
    argv: str = ""

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        """A kept run."""
        return cls(**json.loads(Path(path).read_text()))


@dataclasses.dataclass(frozen=True)
class RunSlot:
    """Where and how long one run goes: its task, seed, budget, timeout and temporary folder."""

    task: str
    seed: int
    budget_steps: int
    timeout_s: float
    work: Path
    resumable: bool = False  # a kept folder (--work-dir): tdscheme checkpoints and resumes

    def record(self, framework: str, done: tuple[str, float, str | None], command: list[str],
               settings: dict[str, Any], evals: list, train: list) -> RunRecord:  # fmt: skip
        """The run's record from :func:`run_process`'s ``done`` and what it left."""
        outcome, seconds, failure = done
        command = [c.replace(str(self.work), "TMP").replace(f"{REPO}/", "") for c in command]
        command = [".venv/bin/" + Path(c).name if c.startswith(sys.prefix) else c for c in command]
        return RunRecord(self.task, framework, self.seed, self.budget_steps, outcome, failure,
                         round(seconds, 1), command, settings, evals, train)  # fmt: skip


def run_process(
    command: list[str], slot: RunSlot, *, cwd: Path | None = None, env: dict | None = None
) -> tuple[str, float, str | None]:
    """Runs ``command`` with its output in ``slot.work/out.log``: ``(outcome, seconds, failure)``.

    At ``slot.timeout_s`` the process gets SIGINT (tdscheme then stops and shuts its Ray
    down) and, 60 s later, SIGKILL; what it logged so far is kept (``"timeout"``).
    """
    started, log_path = time.perf_counter(), slot.work / "out.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        try:
            code = proc.wait(timeout=slot.timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return "timeout", time.perf_counter() - started, f"stopped at {slot.timeout_s:.0f} s"
    seconds = time.perf_counter() - started
    if code != 0:
        return "failed", seconds, f"exit {code}: ...{log_path.read_text(errors='replace')[-1500:]}"
    return "ok", seconds, None


def peer_versions() -> dict[str, str]:
    """The installed versions of the peers' packages (those installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("stable_baselines3", "rl_zoo3", "envpool", "ale_py", "mujoco"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


# -- Stable-Baselines3 through the RL Zoo ----------------------------------------------------


@dataclasses.dataclass
class Sb3Spec:
    """One SB3 run: the zoo entry, the budget and tdscheme's evaluation protocol.

    Args:
        algo: the zoo's algorithm name (``"ppo"``, ``"sac"``): its ``hyperparams/<algo>.yml``.
        env_id: the gymnasium id that trains (``"PongNoFrameskip-v4"``).
        zoo_key: the entry of that file to use (``"CartPole-v1"``, ``"atari"``).
        seed: the zoo's ``--seed``.
        budget_steps: agent steps to train (the zoo's ``n_timesteps``: schedules anneal over it).
        eval_every_steps, eval_episodes, eval_num_envs: the evaluation (every 0: at the end only).
        target_return, stop_at_target: stop at the first evaluation at or above the target.
        curve_path: where the JSON lines of the curve go.
        torch_threads: torch's intra-op threads (``None``: torch's default), as the preset's
            ``num_threads``: on 2 cores, small networks run fastest on one.
    """

    algo: str
    env_id: str
    zoo_key: str
    seed: int
    budget_steps: int
    eval_every_steps: int
    eval_episodes: int
    eval_num_envs: int
    target_return: float | None
    stop_at_target: bool
    curve_path: str
    torch_threads: int | None = None


def zoo_file(algo: str) -> Path:
    """The installed zoo's hyperparameter file for ``algo`` (``rl_zoo3/hyperparams/<algo>.yml``)."""
    import rl_zoo3

    return Path(rl_zoo3.__file__).parent / "hyperparams" / f"{algo}.yml"


def zoo_entry(algo: str, zoo_key: str) -> dict[str, Any]:
    """The entry ``zoo_key`` of the zoo's ``<algo>.yml`` (YAML anchors and merges resolved).

    Raises:
        KeyError: the file has no such entry.
    """
    import yaml

    entries = yaml.safe_load(zoo_file(algo).read_text())
    if zoo_key not in entries:
        raise KeyError(f"{zoo_file(algo)} has no entry {zoo_key!r}")
    return dict(entries[zoo_key])


def zoo_manager(
    algo: str, env_id: str, zoo_key: str, *, log_folder: str, n_timesteps: int = 0, seed: int = 0
) -> Any:
    """The zoo's ``ExperimentManager`` for ``env_id`` with the entry ``zoo_key``, on the CPU.

    The entry goes to ``log_folder/<algo>.yml`` under ``env_id`` (ale-py's ids registered),
    the manager's ``config``; ``n_timesteps > 0`` overrides the entry's. The manager's own
    evaluation and checkpoints are off: :class:`CurveRecorder` evaluates.
    """
    import gymnasium
    import yaml
    from rl_zoo3.exp_manager import ExperimentManager

    if env_id not in gymnasium.registry:
        import ale_py

        gymnasium.register_envs(ale_py)
    config = Path(log_folder) / f"{algo}.yml"
    config.write_text(yaml.safe_dump({env_id: zoo_entry(algo, zoo_key)}))
    return ExperimentManager(
        argparse.Namespace(), algo, env_id, log_folder, n_timesteps=n_timesteps, eval_freq=0,
        save_freq=-1, seed=seed, verbose=0, device="cpu", config=str(config),
    )  # fmt: skip


def zoo_settings(algo: str, env_id: str, zoo_key: str, *, n_timesteps: int = 0) -> dict[str, Any]:
    """What the zoo makes of an entry, without building envs or a model.

    Calls ``ExperimentManager.read_hyperparameters`` and ``_preprocess_hyperparams``
    (private in rl_zoo3 2.9.2, pinned in ``constraints.txt``): the steps its
    ``setup_experiment`` takes before it builds the envs.

    Returns:
        ``entry`` (as the file holds it), ``model_kwargs`` (the SB3 constructor's, schedules
        as callables), ``n_envs``, ``n_timesteps``, ``normalize`` (``VecNormalize``'s
        arguments, or ``None``), ``frame_stack`` and ``env_wrapper`` (``None``: none).
    """
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        exp = zoo_manager(algo, env_id, zoo_key, log_folder=tmp, n_timesteps=n_timesteps)
        raw, _ = exp.read_hyperparameters()
        kwargs, env_wrapper, _, _ = exp._preprocess_hyperparams(dict(raw))
    return {
        "entry": zoo_entry(algo, zoo_key), "model_kwargs": kwargs, "n_envs": exp.n_envs,
        "n_timesteps": exp.n_timesteps, "frame_stack": exp.frame_stack, "env_wrapper": env_wrapper,
        "normalize": dict(exp.normalize_kwargs) if exp.normalize else None,
    }  # fmt: skip


class CurveLog:
    """Appends a run's points to ``path`` as JSON lines, with ``wall_s`` since ``started``."""

    def __init__(self, path: str | Path, started: float) -> None:
        self.path, self.started = Path(path), started

    def write(self, kind: str, **fields: Any) -> None:
        """Appends ``{"kind": kind, "wall_s": ..., **fields}`` (one line, closed at once)."""
        row = {"kind": kind, "wall_s": round(time.perf_counter() - self.started, 3), **fields}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")


class CurveRecorder:
    """SB3's step callback (through ``ConvertCallback``): training episodes and evaluations.

    Called after every vectorized env step with the algorithm's ``locals()``; returns
    ``False`` to stop ``learn`` (the target reached, with ``stop_at_target``).

    Args:
        spec: the run.
        log: where the points go.
        evaluate: ``evaluate(model) -> list of episode returns``.
    """

    def __init__(self, spec: Sb3Spec, log: CurveLog, evaluate: Callable[[Any], list[float]]):
        self.spec = spec
        self.log = log
        self.evaluate = evaluate
        self.next_eval_steps = spec.eval_every_steps or None
        self.last_eval_steps = -1
        self.reached = False

    def __call__(self, locals_: dict[str, Any], globals_: dict[str, Any]) -> bool:
        model = locals_["self"]
        steps = int(model.num_timesteps)
        for info in locals_.get("infos", ()):
            if "episode" in info:  # Monitor's: the whole game's score under the Atari wrappers
                self.log.write("train", steps=steps, ret=float(info["episode"]["r"]))
        if self.next_eval_steps is not None and steps >= self.next_eval_steps:
            every = self.spec.eval_every_steps
            self.next_eval_steps += every * (1 + (steps - self.next_eval_steps) // every)
            self.run_eval(model)
        return not (self.reached and self.spec.stop_at_target)

    def run_eval(self, model: Any) -> None:
        """Evaluates ``model`` now and logs the mean return (and checks the target)."""
        import numpy as np

        steps = int(model.num_timesteps)
        started = time.perf_counter()
        returns = self.evaluate(model)
        mean = float(np.mean(returns))
        self.log.write(
            "eval", steps=steps, ret=mean, std=float(np.std(returns)),
            eval_s=round(time.perf_counter() - started, 3),
        )  # fmt: skip
        self.last_eval_steps = steps
        target = self.spec.target_return
        self.reached = self.reached or (target is not None and mean >= target)


def train_sb3(spec: Sb3Spec) -> None:
    """Trains ``spec``'s run with SB3 and the zoo's settings, writing its curve as it goes.

    The wall clock starts before the zoo builds the envs and the model (as tdscheme's
    Trainer clock starts before Ray and the workers), after the imports.
    """
    from stable_baselines3.common.callbacks import CallbackList, ConvertCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import sync_envs_normalization

    if spec.torch_threads:
        import torch

        torch.set_num_threads(spec.torch_threads)
    log = CurveLog(spec.curve_path, time.perf_counter())
    with tempfile.TemporaryDirectory() as tmp:
        exp = zoo_manager(
            spec.algo, spec.env_id, spec.zoo_key, log_folder=tmp,
            n_timesteps=spec.budget_steps, seed=spec.seed,
        )  # fmt: skip
        model, saved = exp.setup_experiment()
        eval_env = exp.create_envs(spec.eval_num_envs, eval_env=True)
        log.write(
            "settings", n_envs=exp.n_envs, hyperparams=json.loads(json.dumps(saved, default=repr))
        )

        def evaluate(model: Any) -> list[float]:
            sync_envs_normalization(model.get_env(), eval_env)  # VecNormalize's statistics
            returns, _ = evaluate_policy(
                model, eval_env, n_eval_episodes=spec.eval_episodes, deterministic=True,
                return_episode_rewards=True,
            )  # fmt: skip
            return list(returns)

        recorder = CurveRecorder(spec, log, evaluate)
        callback = CallbackList([*exp.callbacks, ConvertCallback(recorder)])
        model.learn(spec.budget_steps, callback=callback)
        if not (recorder.reached and spec.stop_at_target) and (
            recorder.last_eval_steps != model.num_timesteps
        ):
            recorder.run_eval(model)  # the final evaluation, as the Trainer's eval_at_end
        log.write("end", steps=int(model.num_timesteps))
        eval_env.close()
        model.get_env().close()


def sb3_name(algo: str) -> str:
    """The framework name of an SB3 run on the results page (``"SB3 PPO (RL Zoo)"``)."""
    return f"SB3 {algo.upper()} (RL Zoo)"


def sb3_run(slot: RunSlot, spec: Sb3Spec) -> RunRecord:
    """Runs ``spec`` in its own process (``learning_peers.py sb3``); its record."""
    from importlib.metadata import version

    spec = dataclasses.replace(spec, curve_path=str(slot.work / "curve.jsonl"))
    (slot.work / "spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
    command = [sys.executable, str(Path(__file__).resolve()), "sb3", str(slot.work / "spec.json")]
    done = run_process(command, slot)
    curve = read_curve(spec.curve_path) if Path(spec.curve_path).exists() else {}
    settings = {
        "zoo_file": f"rl_zoo3/hyperparams/{spec.algo}.yml", "zoo_key": spec.zoo_key,
        "env_id": spec.env_id, "entry": zoo_entry(spec.algo, spec.zoo_key),
        "used": curve.get("settings", {}),
        "eval": {"every_steps": spec.eval_every_steps, "episodes": spec.eval_episodes},
        "torch_threads": spec.torch_threads,
        "versions": {p: version(p) for p in ("rl_zoo3", "stable_baselines3")},
    }  # fmt: skip
    return slot.record(sb3_name(spec.algo), done, command, settings,
                       curve.get("eval", []), curve.get("train", []))  # fmt: skip


def read_curve(path: str | Path) -> dict[str, Any]:
    """The points of a curve file: ``{"eval": [[steps, wall_s, ret]], "train": [...], ...}``.

    ``train`` rows are ``[steps, wall_s, ret, 1]`` (one episode each); ``settings`` is the
    first ``settings`` line; a last line cut by a kill is ignored.
    """
    out: dict[str, Any] = {"eval": [], "train": [], "settings": {}, "end_steps": None}
    for line in Path(path).read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row["kind"] == "eval":
            out["eval"].append([row["steps"], row["wall_s"], row["ret"]])
        elif row["kind"] == "train":
            out["train"].append([row["steps"], row["wall_s"], row["ret"], 1])
        elif row["kind"] == "settings":
            out["settings"] = {k: v for k, v in row.items() if k not in ("kind", "wall_s")}
        elif row["kind"] == "end":
            out["end_steps"] = row["steps"]
    return out


# -- CleanRL ---------------------------------------------------------------------------------

#: The environment variable the adapted CleanRL script reads its ``Args`` fields from (JSON).
CLEANRL_ARGS_ENV = "TDSCHEME_BENCH_CLEANRL_ARGS"


@dataclasses.dataclass(frozen=True)
class Replacement:
    """One textual change to a peer's script, with its reason.

    Args:
        old: the exact text looked for (each occurrence is replaced).
        new: its replacement.
        reason: why today's packages need it.
        required: the script is expected to hold ``old`` (else reported as missing);
            ``False`` for a change some versions of the script need.
        unless_importable: apply only when this module cannot be imported.
    """

    old: str
    new: str
    reason: str
    required: bool = True
    unless_importable: str | None = None


def cleanrl_replacements() -> tuple[Replacement, ...]:
    """The changes ``cleanrl/ppo_atari_envpool.py`` needs under gymnasium 1.x, EnvPool 1.2, NumPy 2.

    Checked against vwxyzjn/cleanrl at fe8d8a03 (2026-04-20). EnvPool 1.2 returns a
    gymnasium ``VectorEnv`` for ``env_type="gym"`` too: ``reset`` returns
    ``(obs, info)``, ``step`` five values, ``num_envs`` and ``single_*_space`` are
    read-only properties; ``info`` keeps ``"lives"``, ``"reward"`` and ``"terminated"``.
    """
    null_writer = (
        "class SummaryWriter:  # benchmark: no tensorboard; the returns are read from stdout\n"
        "    def __getattr__(self, name):\n        return lambda *args, **kwargs: None\n\n"
        "    def __init__(self, *args, **kwargs):\n        pass\n"
    )
    props = "EnvPool 1.2's VectorEnv has it as a read-only property (setting it raises)"
    return (
        Replacement("import gym\n", "import gymnasium as gym\n",
                    "gym is not installed; EnvPool 1.2 speaks gymnasium"),
        Replacement("import tyro\n", "import json\n",
                    f"no tyro needed: Args' fields come from ${CLEANRL_ARGS_ENV} (JSON)"),
        Replacement(
            "    args = tyro.cli(Args)\n",
            "    _bench_started = time.time()  # benchmark: the clock starts before the envs\n"
            f"    args = Args(**json.loads(os.environ[{CLEANRL_ARGS_ENV!r}]))\n",
            "Args from the benchmark (JSON), and the wall clock's start",
        ),
        Replacement("from torch.utils.tensorboard import SummaryWriter\n", null_writer,
                    "tensorboard is not installed (its event files are not read)",
                    unless_importable="tensorboard"),
        Replacement("    envs.num_envs = args.num_envs\n", "", props),
        Replacement("    envs.single_action_space = envs.action_space\n", "", props),
        Replacement("    envs.single_observation_space = envs.observation_space\n", "", props),
        Replacement(
            '        self.num_envs = getattr(env, "num_envs", 1)\n',
            '        self.num_envs = getattr(env, "num_envs", 1)\n'
            "        self.single_action_space = env.single_action_space\n"
            "        self.single_observation_space = env.single_observation_space\n",
            "gymnasium 1.x's Wrapper no longer forwards unknown attributes to the env",
        ),
        Replacement("        observations = super().reset(**kwargs)\n",
                    "        observations, _ = super().reset(**kwargs)\n",
                    "gymnasium's reset returns (obs, info)"),
        Replacement(
            "        observations, rewards, dones, infos = super().step(action)\n",
            "        observations, rewards, terminated, truncated, infos = super().step(action)\n"
            "        dones = np.logical_or(terminated, truncated)\n",
            "gymnasium's step returns terminated and truncated (the script's loop keeps dones)",
        ),
        Replacement(
            """print(f"global_step={global_step}, episodic_return={info['r'][idx]}")""",
            """print(f"global_step={global_step}, episodic_return={info['r'][idx]}, """
            """wall_s={time.time() - _bench_started:.3f}", flush=True)""",
            "each episode's wall time on the line the benchmark parses",
        ),
        Replacement("np.bool8", "np.bool_", "NumPy 2 removed np.bool8", required=False),
    )  # fmt: skip


def adapt_source(
    text: str,
    replacements: tuple[Replacement, ...],
    *,
    importable: Callable[[str], bool] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """Applies ``replacements`` to a script's text, reporting each one.

    A replacement whose text is not found is reported, not raised: the script may have
    changed upstream (then read the report and the script's output).

    Args:
        text: the script.
        replacements: the changes, applied in order.
        importable: ``importable(module) -> bool`` (default: ``importlib.util.find_spec``).

    Returns:
        The new text, and per replacement ``{"old", "reason", "count", "status"}`` where
        status is ``"applied"``, ``"missing"`` (required, not found), ``"not needed"``
        (optional, not found) or ``"skipped: <module> is installed"``.

    Example:
        >>> new, report = adapt_source("import gym\\n", cleanrl_replacements()[:2])
        >>> new, [r["status"] for r in report]
        ('import gymnasium as gym\\n', ['applied', 'missing'])
    """
    if importable is None:

        def importable(name: str) -> bool:
            return importlib.util.find_spec(name) is not None

    report = []
    for r in replacements:
        count = text.count(r.old)
        if r.unless_importable and importable(r.unless_importable):
            status = f"skipped: {r.unless_importable} is installed"
        elif count:
            text = text.replace(r.old, r.new)
            status = "applied"
        else:
            status = "missing" if r.required else "not needed"
        report.append({"old": r.old.strip(), "reason": r.reason, "count": count, "status": status})
    return text, report


def prepare_cleanrl(
    cleanrl_dir: str | Path, work_dir: str | Path, *, script: str = "ppo_atari_envpool.py"
) -> tuple[Path, list[dict[str, Any]], dict[str, str]]:
    """Writes the adapted copy of ``cleanrl_dir/cleanrl/<script>`` into ``work_dir``.

    Returns:
        The adapted script's path, the replacements' report and the source's identity
        (``path``, ``sha256`` and, in a git checkout, ``commit``).

    Raises:
        FileNotFoundError: the checkout has no such script.
    """
    import hashlib

    source = Path(cleanrl_dir) / "cleanrl" / script
    text = source.read_text()
    adapted, report = adapt_source(text, cleanrl_replacements())
    target = Path(work_dir) / script
    target.write_text(adapted)
    origin = {"path": str(source.resolve()), "sha256": hashlib.sha256(text.encode()).hexdigest()}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(cleanrl_dir), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
        if out.returncode == 0:
            origin["commit"] = out.stdout.strip()
    return target, report, origin


_CLEANRL_LINE = re.compile(
    r"global_step=(\d+), episodic_return=([-+0-9.eE]+|nan)(?:, wall_s=([0-9.]+))?"
)


def parse_cleanrl_stdout(text: str) -> list[list[float | None]]:
    """CleanRL's episode lines as training rows ``[steps, wall_s or None, return, 1]``.

    Example:
        >>> parse_cleanrl_stdout("SPS: 9\\nglobal_step=1024, episodic_return=-21.0, wall_s=3.5\\n")
        [[1024, 3.5, -21.0, 1]]
    """
    rows: list[list[float | None]] = []
    for match in _CLEANRL_LINE.finditer(text):
        steps, ret, wall = match.groups()
        rows.append([int(steps), float(wall) if wall else None, float(ret), 1])
    return rows


def cleanrl_run(
    slot: RunSlot, env_id: str, cleanrl_dir: Path, *, torch_threads: int | None = None
) -> RunRecord:
    """CleanRL's ``ppo_atari_envpool.py`` adapted in ``slot.work`` and run there; its record."""
    script, report, origin = prepare_cleanrl(cleanrl_dir, slot.work)
    args = {"env_id": env_id, "seed": slot.seed, "total_timesteps": slot.budget_steps}
    args["cuda"] = False  # the same CPUs as the others
    env = {**os.environ, CLEANRL_ARGS_ENV: json.dumps(args)}
    if torch_threads:  # the script leaves torch's threads alone: OpenMP's variable sets them
        env["OMP_NUM_THREADS"] = str(torch_threads)
    command = [sys.executable, str(script)]
    done = run_process(command, slot, cwd=slot.work, env=env)
    train = parse_cleanrl_stdout((slot.work / "out.log").read_text(errors="replace"))
    settings = {"source": origin, "args": args, "replacements": report, "threads": torch_threads}
    return slot.record(CLEANRL_NAME, done, command, settings, [], train)


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Runs one SB3 (RL Zoo) run of learning.py.")
    parser.add_argument("runner", choices=["sb3"])
    parser.add_argument("spec", help="a JSON file holding an Sb3Spec")
    args = parser.parse_args(argv)
    train_sb3(Sb3Spec(**json.loads(Path(args.spec).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
