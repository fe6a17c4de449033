"""torchrl's RayCollector client scripts, run with torchrl's class and with tdscheme's.

A drop-in is judged by what its users already run. This runner takes four scripts that
pytorch/rl ships as users of ``torchrl.collectors.distributed.RayCollector`` from a pytorch/rl
tree obtained at run time (``--torchrl-src``, a checkout; or ``--from-sdist``, torchrl's source
distribution from the package index), copies each into a temporary folder, applies the named
patches of ``client_scripts.py`` there (2 cores, no GPU, today's packages), and runs it twice in
fresh processes: as patched (torchrl's class) and with its ``RayCollector`` import line swapped
for ``from tdscheme import RayCollector``, which is all a user changes. Before the tdscheme
run it checks that the two copies differ by that line alone. Run from the repository root::

    .venv/bin/python benchmarks/torchrl_clients/run.py --torchrl-src ~/rl --out /tmp/clients.md
    .venv/bin/python benchmarks/torchrl_clients/run.py --torchrl-src ~/rl --scripts ray_collect

Each run has its own process group and its own local Ray (the scripts start it), killed
when the run ends or passes ``--timeout-s``. A script whose optional packages are missing
(``pip install -c constraints.txt -e ".[clients]"``) is recorded as ``skip`` with the reason;
so is every script when no source is given or none can be had.

Output: one JSON line per run (machine, versions and the scripts' source included), then the
source and a markdown table (script, each peer's outcome and wall seconds, the failure's last
line), also written to ``--out``. Exit status 0 whatever the outcomes, 2 when a patch does not
apply to the given source (the source is not the release the patches were written for).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
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
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the modules beside this one; benchmarks/: report, harness

from client_scripts import TDSCHEME_IMPORT, ClientScript, client_scripts  # noqa: E402
from patching import PatchError, apply_patches, changed_lines, swap_import  # noqa: E402
from torchrl_source import (  # noqa: E402
    HOW_TO_GET_ONE,
    SourceUnavailable,
    TorchrlSource,
    from_checkout,
    from_sdist,
)

PEERS = ("torchrl", "tdscheme")


@dataclass
class Run:
    """One script's run with one peer's class."""

    script: str
    peer: str
    outcome: str
    wall_s: float
    failure: str = ""
    log: str = ""


def patched_texts(client: ClientScript, source: TorchrlSource, peer: str) -> dict[str, str]:
    """The client's files from ``source``, patched; for tdscheme, with the import swapped too.

    Args:
        client: the script.
        source: the pytorch/rl tree.
        peer: ``"torchrl"`` or ``"tdscheme"``.

    Returns:
        File name to patched text, for the script's files.

    Raises:
        PatchError: a patch or the swap does not apply exactly once; or, for tdscheme, the
            result differs from the torchrl run's script by more than the import line.
    """
    origin = source.origin()
    folder = source.root / client.folder
    texts = {name: (folder / name).read_text() for name in client.files}
    texts = apply_patches(texts, client.patches, origin=origin)
    if peer == "torchrl":
        return texts
    try:
        swapped = swap_import(texts[client.script], client.torchrl_import, TDSCHEME_IMPORT)
    except PatchError as error:
        raise PatchError(f"import swap in {client.script} (from {origin}): {error}") from None
    changed = [(a.strip(), b.strip()) for a, b in changed_lines(texts[client.script], swapped)]
    if changed != [(client.torchrl_import, TDSCHEME_IMPORT)]:
        raise PatchError(f"{client.script}: the swap changed {changed}, not the import alone")
    return {**texts, client.script: swapped}


def prepare(client: ClientScript, source: TorchrlSource, peer: str, workdir: Path) -> Path:
    """Writes the client's patched files, and our modules it imports, into ``workdir``.

    Returns:
        The path of the script to run (``workdir / client.script``).
    """
    for name, text in patched_texts(client, source, peer).items():
        (workdir / name).write_text(text)
    for module in client.modules:
        shutil.copy2(HERE / module, workdir / module)
    return workdir / client.script


def script_env(folder: Path) -> dict[str, str]:
    """The environment a prepared script runs in: ``folder`` first on ``PYTHONPATH``.

    Ray puts the driver script's folder on its workers' ``sys.path`` only while the driver's
    working directory is that folder; IMPALA's hydra config changes it (``hydra.job.chdir``).
    Local Ray workers inherit the driver's environment, so ``PYTHONPATH`` lets them import
    the modules copied beside the script (``torch_resize.py``) wherever the driver stands.
    """
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}


def missing(client: ClientScript) -> list[str]:
    """The optional modules the script needs that are not installed."""
    return [name for name in client.needs if importlib.util.find_spec(name) is None]


def failure_line(output: str) -> str:
    """The line that says why a run failed: the last exception line, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Interrupt")):
            return line[:300]
    return lines[-1][:300] if lines else ""


def run_once(
    client: ClientScript, source: TorchrlSource, peer: str, log_dir: Path, timeout_s: float
) -> Run:
    """Runs ``client`` with ``peer``'s class in its own process group; kills the group after.

    Raises:
        PatchError: the patches or the swap do not apply to ``source`` (see :func:`prepare`).
    """
    lacking = missing(client)
    if lacking:
        reason = f"missing {', '.join(lacking)} (pip install -c constraints.txt -e '.[clients]')"
        return Run(client.script, peer, "skip", 0.0, reason)
    log = log_dir / f"{client.name}.{peer}.log"
    with tempfile.TemporaryDirectory(prefix="tdscheme-client-") as tmp:
        script = prepare(client, source, peer, Path(tmp))
        env = script_env(script.parent)
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
            finally:  # the script's Ray processes are in its group: none outlives the run
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        wall_s = time.monotonic() - start
    output = log.read_text(errors="replace")
    if rc == 0:
        return Run(client.script, peer, "ok", wall_s, log=str(log))
    if rc is None:
        return Run(
            client.script, peer, "timeout", wall_s, f"no exit in {timeout_s:.0f} s", str(log)
        )
    return Run(client.script, peer, "fail", wall_s, f"rc={rc}: {failure_line(output)}", str(log))


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
        text = "; ".join(dict.fromkeys(failures)).replace("|", "\\|")
        rows.append("| " + " | ".join([f"`{name}`", *cells, text]) + " |")
    return "\n".join(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [c.name for c in client_scripts()]
    parser.add_argument(
        "--torchrl-src",
        default=os.environ.get("TORCHRL_SRC") or None,
        help="a pytorch/rl checkout's root (default: $TORCHRL_SRC)",
    )
    parser.add_argument(
        "--from-sdist",
        action="store_true",
        help="without --torchrl-src: pip download torchrl's sdist (installed version) instead",
    )
    parser.add_argument(
        "--cache-dir",
        default=str(Path(tempfile.gettempdir()) / "tdscheme-torchrl-sdist"),
        help="where --from-sdist keeps the archive and its unpacked tree",
    )
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
    parser.add_argument("--out", default=None, help="also write the markdown here")
    return parser.parse_args(argv)


def obtain_source(args: argparse.Namespace) -> TorchrlSource:
    """The pytorch/rl tree the arguments name.

    Raises:
        SourceUnavailable: none was named, or the named one cannot be had.
    """
    if args.torchrl_src:
        return from_checkout(args.torchrl_src)
    if args.from_sdist:
        import torchrl

        return from_sdist(torchrl.__version__.split("+")[0], Path(args.cache_dir))
    raise SourceUnavailable(f"no torchrl source given: {HOW_TO_GET_ONE}, or pass --from-sdist")


def main(argv: list[str] | None = None) -> int:
    """Runs the chosen scripts with the chosen peers; prints JSON lines and the table.

    Returns:
        0, or 2 when a patch does not apply to the source.
    """
    args = parse_args(argv)
    wanted = [s for s in args.scripts.split(",") if s]
    peers = [p for p in args.peers.split(",") if p]
    clients = [c for c in client_scripts() if c.name in wanted]
    unknown = [p for p in peers if p not in PEERS] + [
        s for s in wanted if s not in {c.name for c in client_scripts()}
    ]
    if unknown:
        raise SystemExit(f"unknown script or peer {unknown}; see --help")
    from harness import json_line
    from report import machine_info

    machine = machine_info()
    try:
        source = obtain_source(args)
    except SourceUnavailable as error:
        print(f"skipping torchrl's client scripts: {error}", file=sys.stderr)
        source, where = None, f"torchrl scripts: none ({error})"
    else:
        where = f"torchrl scripts from the {source.origin()}"
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="tdscheme-clients-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    runs, status = [], 0
    for client in clients:
        for peer in peers:
            if source is None:
                run = Run(client.script, peer, "skip", 0.0, "no torchrl source (see above)")
            else:
                try:
                    run = run_once(
                        client, source, peer, log_dir, args.timeout_s or client.timeout_s
                    )
                except PatchError as error:
                    print(f"error: {error}", file=sys.stderr)
                    run, status = Run(client.script, peer, "patch-error", 0.0, str(error)), 2
            runs.append(run)
            described = source.describe() if source else None
            json_line({**asdict(run), "source": described, "machine": machine})
    markdown = where + "\n\n" + table(runs, peers)
    print(markdown)
    if args.out:
        Path(args.out).write_text(markdown + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
