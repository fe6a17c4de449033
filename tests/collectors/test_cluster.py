"""Ray lifecycle: start-if-needed, join a multi-node cluster, leave nothing behind.

These run in a subprocess because the test session already holds a Ray.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

JOIN_CLUSTER = textwrap.dedent(
    """
    import functools, json
    import ray
    from ray.cluster_utils import Cluster
    from tdscheme import RayCollector
    from tdscheme.testing import make_env, mlp_policy

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        collector = RayCollector(
            functools.partial(make_env, "CartPole-v1"), mlp_policy(4, 2), frames_per_batch=100,
            total_frames=400, num_collectors=2, remote_configs={"num_cpus": 1},
            ray_init_config={"address": cluster.address},
        )
        nodes = collector.worker_nodes()
        frames = sum(b.numel() for b in collector)
        collector.shutdown()
        print(json.dumps({"nodes": nodes, "frames": frames,
                          "cluster_nodes": len(cluster.list_all_nodes())}))
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    """
)

WAIT_FOR_A_NODE = textwrap.dedent(
    """
    import functools, json, threading, time
    import ray
    from ray.cluster_utils import Cluster
    from tdscheme import RayCollector
    from tdscheme.runtime.placement import PlacementError
    from tdscheme.testing import make_env, mlp_policy

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    kwargs = dict(
        create_env_fn=functools.partial(make_env, "CartPole-v1"), policy=mlp_policy(4, 2),
        frames_per_batch=100, total_frames=400, num_collectors=2, remote_configs={"num_cpus": 1},
        ray_init_config={"address": cluster.address},
    )
    built, errors = [], []
    try:
        try:
            RayCollector(**kwargs)  # placement="check": 2 CPUs asked of a 1-CPU cluster
            refused = None
        except PlacementError as err:
            refused = str(err)
        ray.shutdown()

        def build():
            try:
                built.append(RayCollector(**kwargs, placement="wait", actor_start_timeout_s=180))
            except BaseException as err:
                errors.append(repr(err))

        thread = threading.Thread(target=build)
        thread.start()
        time.sleep(5.0)
        waited = thread.is_alive() and not built  # one worker placed, one waiting for a node
        cluster.add_node(num_cpus=1)  # what an autoscaler does
        cluster.wait_for_nodes()
        thread.join(timeout=200)
        collector = built[0]
        nodes = collector.worker_nodes()
        frames = sum(b.numel() for b in collector)
        collector.shutdown()
        print(json.dumps({"refused": refused, "waited": waited, "nodes": nodes, "frames": frames,
                          "errors": errors}))
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    """
)

START_LOCAL = textwrap.dedent(
    """
    import functools, json
    import ray
    from tdscheme import RayCollector
    from tdscheme.testing import make_env, mlp_policy

    assert not ray.is_initialized()
    with RayCollector(functools.partial(make_env, "CartPole-v1"), mlp_policy(4, 2),
                      frames_per_batch=50, total_frames=100, num_collectors=1) as collector:
        started = ray.is_initialized()
        frames = sum(b.numel() for b in collector)
    print(json.dumps({"started": started, "frames": frames, "after": ray.is_initialized()}))
    """
)


def run(script: str) -> dict:
    # Ray's rule joins a `ray start` cluster recorded in Ray's temp directory, or the one
    # RAY_ADDRESS names: a temp directory of its own keeps this program from another's.
    temp_dir = tempfile.mkdtemp(prefix="tdc", dir="/tmp")  # short: Ray puts sockets in it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = temp_dir
    try:
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
            check=False, env=env,
        )  # fmt: skip
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_joins_a_two_node_cluster_and_spreads_workers():
    result = run(JOIN_CLUSTER)
    assert result["cluster_nodes"] == 2
    assert len(set(result["nodes"])) == 2, result
    assert result["frames"] == 400


def test_placement_wait_starts_once_a_node_is_added():
    """placement="wait": a request beyond the cluster waits, and runs when a node joins."""
    result = run(WAIT_FOR_A_NODE)
    assert "placement" in result["refused"]  # "check" refuses the same request at once
    assert result["waited"] and not result["errors"], result
    assert len(set(result["nodes"])) == 2, result  # the second worker on the added node
    assert result["frames"] == 400


def test_starts_a_local_ray_only_when_none_runs_and_stops_it():
    assert run(START_LOCAL) == {"started": True, "frames": 100, "after": False}
