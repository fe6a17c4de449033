"""The Ray that tdscheme starts: worker processes that import torchrl before any actor lands."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from tdscheme.runtime.ray_lease import (
    WORKER_PRELOAD_MODULES,
    RayLease,
    _init_kwargs,
    local_ray_config,
    select_token_auth,
)

# Starts a Ray as tdscheme does and reports what its driver and a worker see. A task
# defined in __main__ imports nothing of tdscheme: any tdscheme module in the worker
# was imported by the worker process itself, before the task arrived.
PROGRAM = textwrap.dedent(
    """
    import json, sys
    import ray
    from ray._raylet import AuthenticationMode, get_authentication_mode
    from tdscheme.runtime import RayLease

    lease = RayLease.acquire(json.loads(sys.argv[1]))

    @ray.remote
    def look(names):
        import os
        loaded = {name: name in sys.modules for name in names}
        return {"loaded": loaded, "worker_auth_mode": os.environ.get("RAY_AUTH_MODE")}

    try:
        report = ray.get(look.remote(json.loads(sys.argv[2])), timeout=180)
        report["driver_token_auth"] = get_authentication_mode() == AuthenticationMode.TOKEN
        print(json.dumps(report))
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
def test_a_started_ray_preloads_torchrl_and_starts_quietly_with_token_auth(preload):
    temp_dir = tempfile.mkdtemp(prefix="tds", dir="/tmp")  # short: Ray puts sockets in it
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # as a user's shell
    try:
        names = [*WORKER_PRELOAD_MODULES, "torch", "torchrl"]
        config = {"_temp_dir": temp_dir, "num_cpus": 1}
        if not preload:  # a _system_config of one's own replaces tdscheme's
            config["_system_config"] = {}
        result = subprocess.run(
            [sys.executable, "-c", PROGRAM, json.dumps(config), json.dumps(names)],
            capture_output=True, text=True, timeout=240, env=env,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert report["loaded"] == dict.fromkeys(names, preload)
        # Ray >= 2.52 turns token authentication on for a new local Ray and warns that it
        # did, unless RAY_AUTH_MODE is set; tdscheme selects the same mode explicitly.
        assert report["driver_token_auth"] and report["worker_auth_mode"] == "token"
        assert "Token authentication" not in result.stderr
        assert "Started a local Ray instance" not in result.stderr  # Ray's INFO: WARNING level
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_lease_remembers_its_config(ray_session):
    lease = RayLease.acquire({"num_cpus": 1})  # Ray is running: the config is not applied
    try:
        assert lease.config == {"num_cpus": 1} and not lease.started
    finally:
        lease.release()


def test_token_auth_is_selected_only_when_the_user_did_not_choose(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert select_token_auth() is False
    assert os.environ["RAY_AUTH_MODE"] == "disabled"


def test_ray_logs_at_the_drivers_level_unless_told(monkeypatch):
    monkeypatch.setattr(logging.getLogger("tdscheme"), "level", logging.INFO)
    assert local_ray_config()["logging_level"] == logging.INFO
    assert _init_kwargs({"address": "ray://x:1"})["logging_level"] == logging.INFO
    assert _init_kwargs({"logging_level": logging.DEBUG})["logging_level"] == logging.DEBUG
    monkeypatch.setattr(logging.getLogger("tdscheme"), "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "level", logging.WARNING)
    assert local_ray_config()["logging_level"] == logging.WARNING
