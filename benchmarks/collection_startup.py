"""``collection.py``'s ``startup`` section: construction to first batch in a fresh process.

What it measures is in ``collection.py``'s docstring.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time

from collection_runs import Measurement, Settings, log
from harness import fresh_ray_env, settle, turn_order
from report import Recorder

#: One startup run: a fresh process, no Ray running; prints a JSON line with the times.
STARTUP_SCRIPT = """
import functools, json, sys, time
start = time.perf_counter()
impl = sys.argv[1]
if impl == "tdscheme, Ray up":  # as `tdscheme train`: Ray first, its workers preload meanwhile
    import ray
    from tdscheme.runtime import local_ray_config
    ray.init(**local_ray_config())
    time.sleep(float(sys.argv[2]))
elif impl.endswith("plain Ray up"):  # the user's own ray.init(), the same wait: nothing preloaded
    import ray
    ray.init(num_cpus=2, include_dashboard=False)
    time.sleep(float(sys.argv[2]))
if impl.startswith("tdscheme"):
    from tdscheme import RayCollector
else:
    from torchrl.collectors.distributed import RayCollector
import torch
from tensordict.nn import TensorDictModule
from tdscheme.envs import make_env
class OneHotArgmax(torch.nn.Module):  # defined here: Ray pickles __main__'s classes by value
    def forward(self, logits):
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.int64)
torch.manual_seed(0)
layers = [torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh()]
net = torch.nn.Sequential(*layers, torch.nn.Linear(64, 2), OneHotArgmax())  # peers.mlp_policy(4, 2)
policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
built = time.perf_counter()
collector = RayCollector(
    functools.partial(make_env, "CartPole-v1"), policy, frames_per_batch=1000,
    total_frames=2**40, num_collectors=2, remote_configs={"num_cpus": 1},
)
next(iter(collector))
first = time.perf_counter()
collector.shutdown()
import ray
ray.shutdown()
print(json.dumps({"construct": first - built, "process": first - start}), flush=True)
"""


def section_startup(rec: Recorder, s: Settings) -> None:
    """Construction (and process start) to first batch in a fresh process, Ray started by each."""
    times: dict[str, list[tuple[float, float]]] = {"tdscheme": [], "torchrl": []}
    # construction only: Ray started, its workers prestarted (and given the same time to import)
    times["tdscheme, Ray up"] = []  # tdscheme's local Ray: its workers preload tdscheme's worker
    times["tdscheme, plain Ray up"] = []  # a user's plain ray.init(): nothing preloaded
    times["torchrl, plain Ray up"] = []
    notes: dict[str, str] = {}
    for run in range(s.startup_runs):
        for impl in turn_order(list(times), run):
            log(f"startup | {impl} | run {run}")
            with tempfile.TemporaryDirectory(prefix="tds-", dir="/tmp") as tmp:
                env = fresh_ray_env(tmp)  # its own Ray, not this script's
                started = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-c", STARTUP_SCRIPT, impl, str(s.prestart_wait_s)],
                    env=env, text=True,
                    capture_output=True, timeout=s.timeout_s,
                )  # fmt: skip
                wall = time.perf_counter() - started
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            if proc.returncode != 0 or not lines:
                notes[impl] = f"n/a: exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
                continue
            got = json.loads(lines[-1])
            times[impl].append((got["construct"], got["process"]))
            log(
                f"  construct {got['construct']:.2f} s, process {got['process']:.2f} s, wall {wall:.1f} s"
            )
            settle()
    config = f"fresh process, 2 collectors, fpb=1000, median of {s.startup_runs}"
    for impl, runs in times.items():
        row = dict(section="startup", impl=impl, env="CartPole-v1", order="first-ready",
                   config=config)  # fmt: skip
        for index, metric in enumerate(("first_batch_s", "process_to_first_batch_s")):
            if impl.endswith("Ray up") and index == 1:
                continue  # its process waited on purpose
            value = statistics.median(r[index] for r in runs) if runs else None
            rec.add(Measurement(**row, metric=metric, value=value, unit="s",
                                note=notes.get(impl, "")))  # fmt: skip
