"""Ray's rule for the address: tdscheme joins a ``ray start`` cluster, and leaves it running.

A real ``ray start --head`` runs in its own temp directory (``RAY_TMPDIR``), so that
its address file is seen only by the programs given that directory, never by other
Ray users of the machine; it is stopped by signalling its own process (``--block``
makes it take its Ray processes down with it), never by ``ray stop``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

# slow: a `ray start` cluster of its own
pytestmark = pytest.mark.slow

# Collects with no ray_init_config (the address file of the `ray start`), then with
# torchrl's default ray_init_config and RAY_ADDRESS naming the cluster (no address
# file to find), and checks the cluster is still up after each collector shut down.
PROGRAM = textwrap.dedent(
    """
    import json, os, sys
    import ray
    from torchrl.collectors.distributed.ray import DEFAULT_RAY_INIT_CONFIG
    from torchrl.testing.mocking_classes import CountingEnv
    from tdscheme import RayCollector
    from tdscheme.testing import CountingPolicy

    def collect(ray_init_config):
        with RayCollector([CountingEnv], CountingPolicy(), frames_per_batch=10, total_frames=20,
                          remote_configs={"num_cpus": 0.5},
                          ray_init_config=ray_init_config) as collector:
            gcs = ray.get_runtime_context().gcs_address
            frames = sum(batch.numel() for batch in collector)
        return {"gcs": gcs, "frames": frames, "connected_after": ray.is_initialized()}

    address, empty_dir = sys.argv[1], sys.argv[2]
    report = {"address_file": collect(None)}
    os.environ["RAY_TMPDIR"] = empty_dir  # no address file there: RAY_ADDRESS only
    os.environ["RAY_ADDRESS"] = address
    report["ray_address"] = collect(dict(DEFAULT_RAY_INIT_CONFIG))
    ray.init(address=address, logging_level="warning")  # the cluster is still up
    report["alive_nodes"] = sum(node["Alive"] for node in ray.nodes())
    ray.shutdown()
    print(json.dumps(report))
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (the `ray start` and every Ray process it started)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout
    return [int(pid) for pid, s in (line.split() for line in out.splitlines()) if int(s) == sid]


@pytest.fixture
def ray_start_cluster():
    """A `ray start --head` of our own (1 CPU, no dashboard); yields (address, its env)."""
    temp_dir = tempfile.mkdtemp(prefix="tdj", dir="/tmp")  # short: Ray puts sockets in it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = temp_dir
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus", "1",
         "--port", str(free_port()), "--include-dashboard=false", "--disable-usage-stats",
         "--block"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        address_file = Path(temp_dir, "ray", "ray_current_cluster")
        deadline = time.monotonic() + 120
        while not address_file.exists() and head.poll() is None:
            assert time.monotonic() < deadline, "ray start did not come up in 120 s"
            time.sleep(0.2)
        assert head.poll() is None, "ray start exited"
        yield address_file.read_text().strip(), env
        assert head.poll() is None, "the cluster went down: tdscheme must leave it running"
    finally:
        head.terminate()  # --block: `ray start` takes its Ray processes down with it
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            head.kill()
        for pid in session_pids(head.pid):  # anything left of *this* cluster only
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_joins_a_ray_start_cluster_as_ray_init_does_and_leaves_it_running(ray_start_cluster):
    address, env = ray_start_cluster
    empty_dir = tempfile.mkdtemp(prefix="tdk", dir="/tmp")
    try:
        result = subprocess.run(
            [sys.executable, "-c", PROGRAM, address, empty_dir],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
    finally:
        shutil.rmtree(empty_dir, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for how in ("address_file", "ray_address"):
        assert report[how] == {"gcs": address, "frames": 20, "connected_after": False}, how
    assert report["alive_nodes"] == 1
