"""Bad RayCollector input fails at construction, naming the argument (no Ray needed)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from tdscheme.collectors import PreemptionConfig, RayCollector, RayCollectorConfig
from tdscheme.collectors.driver.flow import pad_time, stack_rollouts
from tdscheme.collectors.settings.config import settings_signature
from tdscheme.collectors.settings.specs import (
    WorkerSpec,
    default_remote_config,
    for_added_workers,
    remote_configs,
    worker_specs,
)
from tdscheme.rollout.torchrl_names import Collector, MultiSyncCollector, resolve_collector_class
from tdscheme.testing import make_env
from tdscheme.transport.next_fold import MIN_FRAME_BYTES

env = functools.partial(make_env, "CartPole-v1")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"frames_per_batch": 0},
            ValueError,
            r"frames_per_batch=0 is invalid; accepted: an int >= 1",
        ),
        ({"frames_per_batch": -5}, ValueError, r"frames_per_batch=-5"),
        ({"frames_per_batch": 2.5}, ValueError, r"frames_per_batch=2.5"),
        (
            {"frames_per_batch": 101, "num_collectors": 2, "sync": True},
            ValueError,
            r"frames_per_batch=101 is invalid with sync=True and num_collectors=2; accepted: a multiple",
        ),
        (
            {"create_env_fn": [env, env, env], "num_collectors": 2},
            ValueError,
            r"create_env_fn has 3 entries but num_collectors=2",
        ),
        (
            {"create_env_fn": "CartPole-v1"},
            TypeError,
            r"create_env_fn\[0\]='CartPole-v1' is not callable",
        ),
        (
            {"preemption": {"fraction_workers": 0.0, "fraction_samples": 0.5}, "sync": True},
            ValueError,
            r"preemption\['fraction_workers'\]=0.0 must be a number in \(0, 1\]",
        ),
        (
            {"preemption": {"fraction_workers": 0.5, "fraction_samples": 1.5}, "sync": True},
            ValueError,
            r"preemption\['fraction_samples'\]=1.5",
        ),
        (
            {"preemption": {"fraction_workers": 0.5, "fraction_samples": 0.5}},
            ValueError,
            r"preemption=.* is invalid with sync=False; accepted: None, or set sync=True",
        ),
        (
            {"preemption": {"fraction_workers": 0.5}, "sync": True},
            ValueError,
            r"can never cut a worker off",
        ),
        (
            {"preemption": {"fraction": 0.5}, "sync": True},
            ValueError,
            r"unknown keys \['fraction'\]",
        ),
        ({"max_policy_lag": -1}, ValueError, r"max_policy_lag=-1 is invalid; accepted: None"),
        ({"total_frames": 0}, ValueError, r"total_frames=0"),
        ({"num_collectors": 0}, ValueError, r"num_collectors=0"),
        ({"collector_class": "multi"}, ValueError, r"collector_class='multi' is not one of"),
        ({"collector_class": dict}, TypeError, r"collector_class must be a torchrl BaseCollector"),
        ({"compress": "pixels"}, TypeError, r"compress"),
        (
            {"dedup_obs": "yes"},
            ValueError,
            r"dedup_obs=.yes. is invalid; accepted: True, False or .auto.",
        ),
        (
            {"remote_configs": [{}, {}, {}], "num_collectors": 2},
            ValueError,
            r"remote_configs is a list of 3 entries but there are 2 collectors",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    kwargs = {"create_env_fn": env, "frames_per_batch": 100, **kwargs}
    with pytest.raises(error, match=match):
        remote_configs(RayCollectorConfig(**kwargs))


def test_sync_splits_the_batch_over_workers_and_async_does_not():
    sync = RayCollectorConfig(env, frames_per_batch=300, num_collectors=3, sync=True)
    assert [s.frames_per_batch for s in worker_specs(sync)] == [100, 100, 100]
    first_ready = RayCollectorConfig(env, frames_per_batch=300, num_collectors=3)
    assert [s.frames_per_batch for s in worker_specs(first_ready)] == [300, 300, 300]
    assert remote_configs(first_ready) == [{"num_cpus": 1}] * 3


def test_dedup_auto_folds_across_nodes_only_and_starts_no_ray(monkeypatch):
    import ray

    def no_context():
        raise AssertionError("ray.get_runtime_context() would start a Ray")

    # a worker built outside Ray (in the user's process): nothing crosses a node
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "get_runtime_context", no_context)
    assert WorkerSpec(env).fold_next_bytes() is None
    assert WorkerSpec(env, dedup_obs=True).fold_next_bytes() == MIN_FRAME_BYTES
    assert WorkerSpec(env, dedup_obs=False).fold_next_bytes() is None

    class Context:
        def get_node_id(self):
            return "node-b"

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_runtime_context", Context)
    assert WorkerSpec(env, driver_node="node-b").fold_next_bytes() is None
    assert WorkerSpec(env, driver_node="node-a").fold_next_bytes() == MIN_FRAME_BYTES
    assert WorkerSpec(env, driver_node="node-a", dedup_obs=False).fold_next_bytes() is None


def test_on_policy_settings_turn_prefetch_off():
    assert RayCollectorConfig(env, frames_per_batch=10).prefetch_batches == 1
    assert RayCollectorConfig(env, frames_per_batch=10, max_policy_lag=0).prefetch_batches == 0
    on_policy = RayCollectorConfig(env, frames_per_batch=10, update_after_each_batch=True)
    assert on_policy.prefetch_batches == 0


def test_torchrl_collector_names_resolve():
    assert resolve_collector_class(None) is Collector
    assert resolve_collector_class("sync") is MultiSyncCollector
    assert resolve_collector_class(Collector) is Collector


def test_preemption_thresholds():
    cfg = PreemptionConfig(fraction_workers=0.5, fraction_samples=0.6)
    assert not cfg.should_cut(finished=1, workers=2, frames=500, frames_per_batch=1000)
    assert cfg.should_cut(finished=1, workers=2, frames=600, frames_per_batch=1000)
    assert not cfg.should_cut(finished=2, workers=2, frames=1000, frames_per_batch=1000)
    assert not PreemptionConfig().enabled


def test_partial_rollouts_are_padded_and_masked():
    full = TensorDict({"obs": torch.ones(2, 4, 3)}, batch_size=[2, 4])
    part = TensorDict({"obs": torch.full((2, 1, 3), 2.0)}, batch_size=[2, 1])
    batch = stack_rollouts([full, part], masked=True)
    assert batch.batch_size == (2, 2, 4)
    mask = batch["collector", "mask"]
    assert mask[0].all() and mask[1, :, :1].all() and not mask[1, :, 1:].any()
    assert (batch["obs"][1, :, 1:] == 0).all() and (batch["obs"][1, :, 0] == 2).all()
    with pytest.raises(ValueError, match="more than length=0"):
        pad_time(full, 0)


def test_added_workers_keep_every_setting():
    """add_collectors re-listed 12 of the config's fields: devices and init_random_frames were lost."""
    cfg = RayCollectorConfig(
        env, frames_per_batch=90, num_collectors=3, sync=True, init_random_frames=300,
        device="cpu", storing_device="cpu", env_device="cpu", policy_device="cpu",
        max_frames_per_traj=50, compress=True, max_policy_lag=2, seed=5,
    )  # fmt: skip
    original = worker_specs(cfg)[0]
    added = for_added_workers(cfg, [env, env], collector_kwargs={"reset_at_each_iter": False})
    specs = worker_specs(added)
    assert len(specs) == 2
    for spec in specs:
        assert spec.frames_per_batch == original.frames_per_batch == 30
        for key in ("device", "storing_device", "env_device", "policy_device",
                    "init_random_frames", "max_frames_per_traj", "exploration_type"):  # fmt: skip
            assert spec.collector_kwargs[key] == original.collector_kwargs[key], key
        assert spec.compress is True
    assert original.collector_kwargs["init_random_frames"] == 120  # 100 each: 4 batches of 30
    assert (added.max_policy_lag, added.seed, added.sync) == (2, 5, True)


@pytest.mark.parametrize("cuda", [False, True])
def test_default_remote_config_asks_for_no_gpu_even_with_cuda(monkeypatch, cuda):
    """Workers run the policy on the CPU with CPU weights: a GPU share only if asked for."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert default_remote_config() == {"num_cpus": 1}
    config = RayCollectorConfig(make_env, frames_per_batch=10, num_collectors=2)
    assert remote_configs(config) == [{"num_cpus": 1}] * 2
    given = RayCollectorConfig(make_env, frames_per_batch=10, remote_configs={"num_gpus": 0.5})
    assert remote_configs(given) == [{"num_gpus": 0.5}]  # the user's options as given


def test_collectors_get_a_cpu_copy_of_the_policy_never_the_learners_module():
    """The module handed to the collectors shares no storage with the learner's."""
    from tdscheme.learner.snapshots import cpu_module
    from tdscheme.presets import get_preset

    preset = get_preset("ppo-cartpole")
    learner = preset.learner_factory()(**preset.policy_factory()())
    copy = cpu_module(learner.policy)
    ours = {t.untyped_storage().data_ptr() for t in learner.policy.state_dict().values()}
    theirs = {t.untyped_storage().data_ptr() for t in copy.state_dict().values()}
    assert ours and theirs and not ours & theirs
    assert {t.device.type for t in copy.state_dict().values()} == {"cpu"}
    if torch.cuda.is_available():  # a policy on another device is copied to the CPU
        assert {t.device.type for t in cpu_module(learner.policy.cuda()).state_dict().values()} == {
            "cpu"
        }


def documented_args(doc: str) -> list[str]:
    """The names a Google-style docstring's ``Args:`` section documents (``a, b: ...`` too)."""
    section = doc.split("\n    Args:\n", 1)[1].split("\n\n", 1)[0]
    names = []
    for line in section.splitlines():
        if line.startswith("        ") and not line.startswith("         ") and ":" in line:
            names += [n.strip() for n in line.split(":", 1)[0].split(",")]
    return names


def signature_drift(written: inspect.Signature, declared: inspect.Signature) -> list[str]:
    """Where a written-out signature differs from the one the config's fields declare."""
    drift = []
    w, d = written.parameters, declared.parameters
    if list(w) != list(d):
        drift.append(f"names {list(w)} != {list(d)}")
    for name in set(w) & set(d):
        for attr in ("kind", "default", "annotation"):
            if getattr(w[name], attr) != getattr(d[name], attr):
                drift.append(
                    f"{name}.{attr}: {getattr(w[name], attr)!r} != {getattr(d[name], attr)!r}"
                )
    return sorted(drift)


def test_one_declaration_of_the_settings_signature_fields_and_args_agree():
    """RayCollector's written-out signature is the config's fields, and every field is documented."""
    fields = [f.name for f in dataclasses.fields(RayCollectorConfig)]
    assert list(inspect.signature(RayCollector).parameters) == fields
    assert signature_drift(inspect.signature(RayCollector.__init__), settings_signature()) == []
    assert sorted(documented_args(RayCollectorConfig.__doc__)) == sorted(fields)
    required = [
        name
        for name, p in inspect.signature(RayCollector).parameters.items()
        if p.default is inspect.Parameter.empty
    ]
    assert required == ["create_env_fn", "frames_per_batch"]  # as torchrl's
    shutdown = inspect.signature(RayCollector.shutdown).parameters  # torchrl's: both positional
    assert list(shutdown)[1:3] == ["timeout", "shutdown_ray"]
    assert {shutdown[n].kind for n in ("timeout", "shutdown_ray")} == {
        inspect.Parameter.POSITIONAL_OR_KEYWORD
    }
    with pytest.raises(TypeError, match=r"^RayCollector.__init__\(\) got an unexpected keyword"):
        RayCollector(make_env, frames_per_batch=10, num_colectors=2)


def test_the_signature_check_sees_a_drift():
    """The negative control: a renamed, a retyped and a re-defaulted argument are found."""

    def written(self, create_env_fn: Any, policy: Any = None, *, frames: int = 2) -> None: ...

    def declared(self, create_env_fn: Any, policy: Any = None, *, frames: float = 1) -> None: ...

    def renamed(self, create_env_fn: Any, policy: Any = None, *, frame: int = 2) -> None: ...

    drift = signature_drift(inspect.signature(written), inspect.signature(declared))
    assert drift == ["frames.annotation: 'int' != 'float'", "frames.default: 2 != 1"]
    assert signature_drift(inspect.signature(renamed), inspect.signature(written))


def test_the_args_reader_sees_a_missing_and_a_grouped_name():
    """The negative control: a field left out of the docs, and ``a, b:`` lines, are read."""
    doc = "Summary.\n\n    Args:\n        a, b: two.\n        c: one,\n            more text: here.\n\n    Raises:\n"
    assert documented_args(doc) == ["a", "b", "c"]
