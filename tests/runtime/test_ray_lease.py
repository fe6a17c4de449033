"""The Ray that tdscheme starts: worker processes that import torchrl before any actor lands."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from tdscheme.runtime import WORKER_PRELOAD_MODULES, RayLease, local_ray_config

# A task defined in __main__ imports nothing of tdscheme: any tdscheme module in the
# worker was imported by the worker process itself, before the task arrived.
PROGRAM = textwrap.dedent(
    """
    import json, sys
    import ray
    from tdscheme.runtime import RayLease

    lease = RayLease.acquire(json.loads(sys.argv[1]))

    @ray.remote
    def loaded(names):
        return {name: name in sys.modules for name in names}

    try:
        print(json.dumps(ray.get(loaded.remote(json.loads(sys.argv[2])), timeout=180)))
    finally:
        lease.release()
    """
)


def test_local_ray_config_preloads_the_collector_worker_module():
    config = local_ray_config()
    assert config["address"] == "local" and config["include_dashboard"] is False
    assert config["_system_config"]["preload_python_modules"] == list(WORKER_PRELOAD_MODULES)
    assert "tdscheme.collectors.worker" in WORKER_PRELOAD_MODULES
    assert local_ray_config() is not config  # a fresh dict each time


@pytest.mark.parametrize("preload", [True, False])
def test_workers_of_a_started_ray_have_torchrl_imported_before_any_task(preload):
    temp_dir = tempfile.mkdtemp(prefix="tds", dir="/tmp")  # short: Ray puts sockets in it
    try:
        names = [*WORKER_PRELOAD_MODULES, "torch", "torchrl"]
        config = {"_temp_dir": temp_dir, "num_cpus": 1}
        if not preload:  # a _system_config of one's own replaces tdscheme's
            config["_system_config"] = {}
        result = subprocess.run(
            [sys.executable, "-c", PROGRAM, json.dumps(config), json.dumps(names)],
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.strip().splitlines()[-1]) == dict.fromkeys(names, preload)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_lease_remembers_its_config(ray_session):
    lease = RayLease.acquire({"num_cpus": 1})  # Ray is running: the config is not applied
    try:
        assert lease.config == {"num_cpus": 1} and not lease.started
    finally:
        lease.release()
