"""torchrl's RayCollector client scripts, run with torchrl's class and with tdscheme's.

A drop-in is judged by what its users already run. This runner takes the copies of four
torchrl 0.14 client scripts kept beside it (see README.md here), and runs each twice in
fresh processes: as it is (torchrl's ``RayCollector``) and with its one import line
swapped for ``from tdscheme import RayCollector``, which is all a user changes. The swap
is made on a copy in a temporary folder; the runner checks that the line occurs once and
that nothing else differs. Run from the repository root::

    .venv/bin/python benchmarks/torchrl_clients/run.py --out /tmp/clients.md
    .venv/bin/python benchmarks/torchrl_clients/run.py --scripts ray_collect --peers tdscheme

Each run has its own process group and its own local Ray (the scripts start it), killed
when the run ends or passes ``--timeout-s``. A script whose optional packages are missing
(``pip install -c constraints.txt -e ".[clients]"``) is recorded as ``skip`` with the reason.

Output: one JSON line per run (machine and versions included), then a markdown table
(script, each peer's outcome and wall seconds, the failure's last line), also written to
``--out``. Exit status 0 whatever the outcomes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/report.py

#: The line a user writes instead of the script's torchrl import.
TDSCHEME_IMPORT = "from tdscheme import RayCollector"
PEERS = ("torchrl", "tdscheme")


@dataclass(frozen=True)
class ClientScript:
    """One torchrl client script: where it is, its import line, how it runs shrunk."""

    name: str
    folder: str
    script: str
    torchrl_import: str
    args: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    timeout_s: float = 600.0


#: IMPALA shrunk for 2 cores through hydra overrides: 2 workers, 8 updates, no wandb.
IMPALA_OVERRIDES = (
    "collector.num_workers=2",
    "collector.total_frames=1920",
    "loss.batch_size=2",
    "logger.backend=null",
    "ray_init_config.num_cpus=2",
    "remote_worker_resources.num_gpus=0",
    "remote_worker_resources.memory=536870912",
)

SCRIPTS = (
    ClientScript(
        "ray_collect.py", ".", "ray_collect.py",
        "from torchrl.collectors.distributed.ray import RayCollector", timeout_s=300.0,
    ),
    ClientScript(
        "ray_train.py", ".", "ray_train.py",
        "from torchrl.collectors.distributed.ray import RayCollector",
        needs=("matplotlib", "mujoco", "imageio"),
    ),
    ClientScript(
        "ray_buffer_infra.py", ".", "ray_buffer_infra.py",
        "from torchrl.collectors.distributed.ray import RayCollector", timeout_s=300.0,
    ),
    ClientScript(
        "impala_multi_node_ray.py", "impala", "impala_multi_node_ray.py",
        "from torchrl.collectors.distributed import RayCollector", args=IMPALA_OVERRIDES,
        needs=("hydra", "ale_py"),
    ),
)  # fmt: skip


@dataclass
class Run:
    """One script's run with one peer's class."""

    script: str
    peer: str
    outcome: str
    wall_s: float
    failure: str = ""
    log: str = ""


def swap_import(text: str, old: str, new: str) -> str:
    """``text`` with the one line ``old`` (any indentation) replaced by ``new``.

    Raises:
        ValueError: ``old`` is not on exactly one line.
    """
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    if len(hits) != 1:
        raise ValueError(f"{old!r} is on {len(hits)} lines; expected exactly one")
    line = lines[hits[0]]
    lines[hits[0]] = line[: len(line) - len(line.lstrip())] + new + "\n"
    return "".join(lines)


def prepare(client: ClientScript, peer: str, workdir: Path) -> Path:
    """Copies the script's folder into ``workdir``; for tdscheme, with the import swapped."""
    src = HERE / client.folder / client.script
    if client.folder == ".":  # a single-file script
        shutil.copy2(src, workdir / client.script)
    else:  # a script with its modules and configs
        shutil.copytree(
            src.parent, workdir / client.folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    script = workdir / client.folder / client.script
    text = script.read_text()
    new = client.torchrl_import if peer == "torchrl" else TDSCHEME_IMPORT
    script.write_text(swap_import(text, client.torchrl_import, new))
    return script


def missing(client: ClientScript) -> list[str]:
    """The optional modules the script needs that are not installed."""
    return [name for name in client.needs if importlib.util.find_spec(name) is None]


def failure_line(output: str) -> str:
    """The line that says why a run failed: the last exception line, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Interrupt")) or head == "AssertionError":
            return line[:300]
    return lines[-1][:300] if lines else ""


def run_once(client: ClientScript, peer: str, log_dir: Path, timeout_s: float) -> Run:
    """Runs ``client`` with ``peer``'s class in its own process group; kills the group after."""
    lacking = missing(client)
    if lacking:
        reason = f"missing {', '.join(lacking)} (pip install -c constraints.txt -e '.[clients]')"
        return Run(client.name, peer, "skip", 0.0, reason)
    log = log_dir / f"{Path(client.script).stem}.{peer}.log"
    with tempfile.TemporaryDirectory(prefix="tdscheme-client-") as tmp:
        script = prepare(client, peer, Path(tmp))
        env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
        start = time.monotonic()
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, script.name, *client.args], cwd=script.parent, env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        wall_s = time.monotonic() - start
    output = log.read_text(errors="replace")
    if rc == 0:
        return Run(client.name, peer, "ok", wall_s, log=str(log))
    if rc is None:
        return Run(client.name, peer, "timeout", wall_s, f"no exit in {timeout_s:.0f} s", str(log))
    return Run(client.name, peer, "fail", wall_s, f"rc={rc}: {failure_line(output)}", str(log))


def table(runs: list[Run], peers: list[str]) -> str:
    """The markdown table: one row per script, each peer's outcome and seconds, the failure."""
    head = ["script", *(f"{p}: outcome, wall s" for p in peers), "failure line"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in dict.fromkeys(r.script for r in runs):
        by_peer = {r.peer: r for r in runs if r.script == name}
        cells = [
            f"{by_peer[p].outcome}, {by_peer[p].wall_s:.1f}" if p in by_peer else "-" for p in peers
        ]
        failures = [
            f"{p}: {by_peer[p].failure}" for p in peers if p in by_peer and by_peer[p].failure
        ]
        text = "; ".join(failures).replace("|", "\\|")
        rows.append("| " + " | ".join([f"`{name}`", *cells, text]) + " |")
    return "\n".join(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [Path(c.script).stem for c in SCRIPTS]
    parser.add_argument("--scripts", default=",".join(names), help=f"comma-separated, of {names}")
    parser.add_argument(
        "--peers", default=",".join(PEERS), help="comma-separated, of torchrl,tdscheme"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=None, help="per run (default: per script)"
    )
    parser.add_argument(
        "--log-dir", default=None, help="where each run's output goes (default: a temp dir)"
    )
    parser.add_argument("--out", default=None, help="also write the markdown table here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from report import machine_info

    wanted = args.scripts.split(",")
    peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEERS] + [
        s for s in wanted if s not in {Path(c.script).stem for c in SCRIPTS}
    ]
    if unknown:
        raise SystemExit(f"unknown script or peer {unknown}; accepted: {SCRIPTS=} {PEERS=}")
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="tdscheme-clients-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    runs = []
    for client in SCRIPTS:
        if Path(client.script).stem not in wanted:
            continue
        for peer in peers:
            run = run_once(client, peer, log_dir, args.timeout_s or client.timeout_s)
            runs.append(run)
            print(json.dumps({**asdict(run), "machine": machine}), flush=True)
    markdown = table(runs, peers)
    print(markdown)
    if args.out:
        Path(args.out).write_text(markdown + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
