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

import pytest

# slow: multi-node clusters (ray.cluster_utils.Cluster)
pytestmark = pytest.mark.slow

WAIT_FOR_A_NODE = textwrap.dedent(
    """
    import functools, json, threading, time
    import ray
    from ray.cluster_utils import Cluster
    from tdscheme import RayCollector
    from tdscheme.runtime.placement import PlacementError
    from tdscheme.testing import make_env

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    kwargs = dict(  # 1 KiB frames, random actions: folded from the other node
        create_env_fn=functools.partial(make_env, "CartPole-v1", obs_shape=(4, 16, 16)),
        policy=None,
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
        stats = collector.stats()
        collector.shutdown()
        print(json.dumps({"refused": refused, "waited": waited, "nodes": nodes, "frames": frames,
                          "errors": errors, "dedup": stats["dedup_keys"],
                          "bytes": stats["bytes_received"],
                          "cluster_nodes": len(cluster.list_all_nodes())}))
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    """
)

NODE_REMOVED = textwrap.dedent(
    """
    import functools, json, time
    import ray
    from ray.cluster_utils import Cluster
    from torchrl.data import LazyTensorStorage
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
    from tdscheme import RayCollector
    from tdscheme.replay.ray_held import ray_buffer_options
    from tdscheme.testing import make_env, mlp_policy

    # a node is declared dead ~1 s after its raylet stops answering (Ray's default: ~30 s); a
    # live but busy raylet still has health_check_timeout_ms (Ray's 10 s) to answer each check
    fast = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
            "health_check_failure_threshold": 2}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "resources": {"head": 1},
        "_system_config": fast})
    others = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    # the driver stays connected: torchrl's buffer joins this Ray, not the newest on the machine
    ray.init(address=cluster.address)
    # 5 ms a step: the run outlasts the node's death being noticed and its worker's rebuild
    kwargs = dict(
        create_env_fn=functools.partial(make_env, "CartPole-v1", sleep_s=0.005),
        policy=mlp_policy(4, 2),
        frames_per_batch=100, num_collectors=2, remote_configs={"num_cpus": 1},
        ray_init_config={"address": cluster.address}, max_restarts=3,
    )

    def remove_a_workers_node(collector):
        # a node other than the head (which holds the driver's Ray and the buffer) with a worker
        nodes = collector.worker_nodes()
        victim = next(n for n in others if n.node_id in nodes)
        others.remove(victim)
        cluster.remove_node(victim, allow_graceful=False)  # its processes killed, not drained
        return victim.node_id, nodes

    out = {}
    try:
        # 1. iteration (first-ready): the node goes while batches stream in
        collector = RayCollector(**kwargs, total_frames=3000)
        frames, removed, after = 0, None, None
        for batch in collector:
            frames += batch.numel()
            if removed is None and frames >= 300:
                removed, before = remove_a_workers_node(collector)
            elif removed is not None and frames < 3000 and collector.counters()["restarts"]:
                after = collector.worker_nodes()  # rebuilt (the last batch ends the collector)
        stats = collector.stats(timeout=30)
        out["iteration"] = {"frames": frames, "removed": removed, "before": before,
                            "after": after, "restarts": stats["restarts"],
                            "ledger": stats["ledger"]}
        collector.shutdown()

        # 2. background writes into a Ray-held buffer (its actor on the head node)
        others.append(cluster.add_node(num_cpus=1))
        cluster.wait_for_nodes()
        options = {**ray_buffer_options(), "resources": {"head": 0.01}}
        buffer = RayReplayBuffer(storage=functools.partial(LazyTensorStorage, 10_000),
                                 batch_size=32, remote_config=options)
        collector = RayCollector(**kwargs, total_frames=2000, replay_buffer=buffer)
        collector.start()
        deadline = time.monotonic() + 120
        while buffer.write_count < 400:
            assert time.monotonic() < deadline, "no writes"
            time.sleep(0.05)
        removed, before = remove_a_workers_node(collector)
        deadline = time.monotonic() + 180
        while collector.is_running:
            assert time.monotonic() < deadline, "background collection did not end"
            time.sleep(0.1)
        stats = collector.stats(timeout=30)
        out["background"] = {"frames": stats["frames"], "written": buffer.write_count,
                             "removed": removed, "before": before,
                             "after": collector.worker_nodes(), "restarts": stats["restarts"],
                             "ledger": stats["ledger"]}
        collector.shutdown()
        buffer.shutdown()
        print(json.dumps(out))
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


def run(script: str, timeout_s: float = 240) -> dict:
    # Ray's rule joins a `ray start` cluster recorded in Ray's temp directory, or the one
    # RAY_ADDRESS names: a temp directory of its own keeps this program from another's.
    temp_dir = tempfile.mkdtemp(prefix="tdc", dir="/tmp")  # short: Ray puts sockets in it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = temp_dir
    try:
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout_s,
            check=False, env=env,
        )  # fmt: skip
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-4000:]
    # a removed node's raylet may print after the result: the last JSON line is the result
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


def test_placement_wait_starts_once_a_node_is_added_and_spreads_the_workers():
    """placement="wait": a request beyond the cluster waits, and runs when a node joins; the
    two workers on two nodes, the driver's own node's and the other's, fold observations."""
    result = run(WAIT_FOR_A_NODE)
    assert "placement" in result["refused"]  # "check" refuses the same request at once
    assert result["waited"] and not result["errors"], result
    assert result["cluster_nodes"] == 2
    assert len(set(result["nodes"])) == 2, result  # the second worker on the added node
    assert result["frames"] == 400
    # dedup_obs="auto": the worker on the other node sends each frame once, the driver's
    # node's worker both copies (shared memory): between 1 and 2 observations per frame
    assert result["dedup"] == ["next.observation"]
    assert 1.0 * 1024 * 400 < result["bytes"] < 2.0 * 1024 * 400


def test_starts_a_local_ray_only_when_none_runs_and_stops_it():
    assert run(START_LOCAL) == {"started": True, "frames": 100, "after": False}


def balanced(ledger: dict) -> bool:
    """Balanced, and every frame collected is in one column (yielded or written, lost, ...)."""
    parts = ("yielded", "dropped", "preempted", "lost", "discarded")
    return ledger["balanced"] and ledger["collected"] == sum(ledger[p] for p in parts)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_collectors_node_removed_mid_run_is_survived():
    """A three-node cluster loses a node that runs a collector (its processes killed), in
    first-ready iteration and in background writes into a Ray-held buffer: the worker is
    rebuilt on the node with room, the budget is reached exactly, the ledger balances."""
    result = run(NODE_REMOVED, timeout_s=540)
    for mode, total in (("iteration", 3000), ("background", 2000)):
        r = result[mode]
        assert r["removed"] in r["before"] and r["removed"] not in r["after"], (mode, r)
        assert len(set(r["after"])) == 2 and r["restarts"] >= 1, (mode, r)
        assert r["frames"] == total, (mode, r)
        assert balanced(r["ledger"]), (mode, r["ledger"])
    assert result["background"]["written"] == 2000
