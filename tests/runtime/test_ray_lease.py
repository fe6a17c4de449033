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
    _ray_init,
    existing_cluster_address,
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
    assert "tdscheme.collectors.worker.actor" in WORKER_PRELOAD_MODULES
    assert local_ray_config() is not config  # a fresh dict each time


@pytest.mark.slow  # a Python (and Ray) of its own in a subprocess
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


@pytest.mark.fast
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


def test_any_ray_init_keyword_is_accepted_and_an_unknown_one_is_named():
    # keys outside tdscheme's former fixed list: ray.init's own, and Ray's _-prefixed ones
    kwargs = _init_kwargs({"address": "local", "labels": {"zone": "a"}, "_node_name": "n1"})
    assert kwargs["labels"] == {"zone": "a"} and kwargs["_node_name"] == "n1"
    assert kwargs["num_cpus"] == local_ray_config()["num_cpus"]  # tdscheme's local defaults
    with pytest.raises(ValueError, match=r"ray_init_config\['num_cpu'\]=2 is invalid"):
        _init_kwargs({"num_cpu": 2})
    with pytest.raises(ValueError, match="num_cpu"):  # checked even while Ray runs
        RayLease.acquire({"num_cpu": 2})
    _init_kwargs({"address": "ray://head:10001", "allow_multiple": True})  # Ray Client's


def test_an_unknown_underscore_keyword_is_named_from_rays_own_error():
    # Ray rejects it before starting anything; tdscheme names the key.
    with pytest.raises(ValueError, match=r"ray_init_config\['_no_such_option'\]=1 is invalid"):
        _ray_init({"address": "local", "_no_such_option": 1})


def test_without_an_address_rays_rule_picks_join_or_start(monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no `ray start` address file here
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert _init_kwargs(None)["address"] == "local"  # nothing to join: start one
    assert _init_kwargs({"address": None, "num_cpus": 1})["num_cpus"] == 1
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # as ray.init: join, no local options
    joined = _init_kwargs({"namespace": "x"})
    assert "address" not in joined and "num_cpus" not in joined and joined["namespace"] == "x"
    assert _init_kwargs({"address": "local"})["address"] == "local"  # "local" always starts
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.0.0.2:6379")
    monkeypatch.delenv("RAY_ADDRESS")
    assert existing_cluster_address() == "10.0.0.2:6379"  # the last `ray start`'s
    assert "num_cpus" not in _init_kwargs(None)


def test_ray_init_keeps_the_commands_sigterm_handler():
    """While the command's handlers are installed, ray.init cannot swap in its exiting SIGTERM handler.

    Ray's handler raised SystemExit wherever SIGTERM landed; inside logging's
    after-fork hook the exit was swallowed with logging's lock held, and the command
    hung (the fault row "SIGTERM while Ray starts", about 1 run in 12).
    """
    import signal

    import ray._private.utils as ray_utils

    from tdscheme.runtime import interrupts
    from tdscheme.runtime.ray_lease import _handlers_kept

    def rays_handler(signum, frame):
        raise SystemExit(signum)

    before = signal.getsignal(signal.SIGTERM)
    interrupts.install()
    try:
        ours = signal.getsignal(signal.SIGTERM)
        with _handlers_kept():
            ray_utils.set_sigterm_handler(rays_handler)  # what ray.init calls
        assert signal.getsignal(signal.SIGTERM) is ours
        ray_utils.set_sigterm_handler(rays_handler)  # outside the block: Ray's call works
        assert signal.getsignal(signal.SIGTERM) is rays_handler
    finally:
        interrupts.uninstall()
    with _handlers_kept():  # without the command's handlers, nothing is held back
        ray_utils.set_sigterm_handler(rays_handler)
    assert signal.getsignal(signal.SIGTERM) is rays_handler
    signal.signal(signal.SIGTERM, before)
