"""RayCollector end to end on a real Ray with real gymnasium envs through torchrl."""

from __future__ import annotations

import functools
import logging

import pytest
import ray
import torch

from tdscheme import RayCollector
from tdscheme.collectors import MASK_KEY, POLICY_VERSION_KEY, WORKER_ID_KEY
from tdscheme.errors import WorkerError
from tdscheme.testing import bias_policy, cartpole_modules, kill_and_wait, make_env, mlp_policy

SMALL = {"num_cpus": 0.5}
cartpole = functools.partial(make_env, "CartPole-v1")
pendulum = functools.partial(make_env, "Pendulum-v1")


def worker_ids(batch):
    return sorted(set(batch[WORKER_ID_KEY].flatten().tolist()))


def single(values: torch.Tensor) -> float:
    """The one value a tensor holds (fails if it holds several)."""
    distinct = values.flatten().unique()
    assert distinct.numel() == 1, f"expected one value, got {distinct.tolist()}"
    return distinct.item()


def assert_ledger(stats, **columns):
    """The frame ledger balances, nothing is in flight, its columns are the stats' own counts."""
    ledger = stats["ledger"]
    parts = ("yielded", "dropped", "preempted", "lost", "discarded")
    assert ledger["collected"] == sum(ledger[p] for p in parts) and ledger["balanced"], ledger
    assert ledger["asked"] == ledger["collected"] and ledger["in_flight"] == 0, ledger
    for column, value in columns.items():
        assert ledger[column] == value, (column, ledger)


def assert_books_agree(collector):
    """Mid-iteration: the ledger's requests in flight are the flow's own record, and it balances."""
    ledger = collector._stats.ledger
    in_flight = collector._flow.requests.asked()
    assert ledger.requests_in_flight() == in_flight
    books = ledger.as_dict()
    assert books["in_flight"] == sum(in_flight.values()) and books["balanced"], books


@pytest.fixture(scope="module")
def cartpole_worker(ray_module_clean):
    """One CartPole worker on the compressed transport, built at the driver's WARNING level.

    Shared by the tests that look at one worker's process or one batch (an actor start each
    test would otherwise pay): each test's ``iter`` supersedes the one before it.
    """
    tdscheme_logger = logging.getLogger("tdscheme")
    previous = tdscheme_logger.level
    tdscheme_logger.setLevel(logging.WARNING)
    try:
        collector = RayCollector(
            cartpole, mlp_policy(4, 2), frames_per_batch=100, total_frames=-1,
            num_collectors=1, compress=True, remote_configs=SMALL,
        )  # fmt: skip
    finally:
        tdscheme_logger.setLevel(previous)
    yield collector
    collector.shutdown()


@pytest.mark.fast
def test_async_yields_exact_frames_from_every_worker(ray_clean):
    collector = RayCollector(
        cartpole, mlp_policy(4, 2), frames_per_batch=200, total_frames=2000,
        num_collectors=2, remote_configs=SMALL,
    )  # fmt: skip
    batches = list(collector)
    assert [b.numel() for b in batches] == [200] * 10
    assert {w for b in batches for w in worker_ids(b)} == {0, 1}
    assert all(len(worker_ids(b)) == 1 for b in batches)
    stats = collector.stats()
    assert stats["frames"] == 2000 and stats["batches"] == 10
    assert sum(stats["frames_per_worker"].values()) == 2000
    assert stats["frames_lost"] == stats["frames_dropped"] == stats["frames_preempted"] == 0
    collector.shutdown()  # already shut down at the end of the budget: idempotent


def test_workers_freeze_what_they_built_and_in_process_workers_do_not(cartpole_worker, ray_clean):
    """A worker actor owns its process: its objects leave the collector's generations."""
    import gc

    from tdscheme.collectors import CollectorWorker, WorkerSpec

    next(iter(cartpole_worker))
    frozen = cartpole_worker.workers[0].__ray_call__.remote(lambda self: gc.get_freeze_count())
    assert ray.get(frozen, timeout=60) > 10_000  # torch, torchrl, the env, the policy
    before = gc.get_freeze_count()
    worker = CollectorWorker(0, WorkerSpec(cartpole, mlp_policy(4, 2), frames_per_batch=20))
    worker.shutdown()
    assert gc.get_freeze_count() == before


def test_sync_stacks_one_rollout_per_worker_and_the_same_seed_repeats_it(ray_clean):
    """A sync batch stacks one rollout per worker; a seed repeats a worker's data, another not.

    A stochastic policy (a sampled categorical): the seed must reach the workers' torch RNG
    as well as their envs for the actions, then the states, to repeat. Worker ``i``'s seed is
    ``restart_seed(seed, i)`` whatever the number of workers: one worker repeats worker 0.
    """

    def collect(seed, num_collectors, total_frames):
        torch.manual_seed(0)  # the same initial weights
        with RayCollector(
            cartpole, cartpole_modules()["actor"], frames_per_batch=50 * num_collectors,
            total_frames=total_frames, num_collectors=num_collectors, sync=True, seed=seed,
            remote_configs=SMALL,
        ) as collector:  # fmt: skip
            torch.manual_seed(1234)  # the driver's RNG state must not matter
            return list(collector), collector.stats()

    batches, stats = collect(7, num_collectors=2, total_frames=300)
    assert [tuple(b.batch_size) for b in batches] == [(2, 50)] * 3
    for b in batches:
        assert b[WORKER_ID_KEY][0].unique().tolist() == [0]
        assert b[WORKER_ID_KEY][1].unique().tolist() == [1]
        assert MASK_KEY not in b.keys(True)
    assert stats["frames"] == 300
    a = batches[0]
    assert not torch.equal(a["observation"][0], a["observation"][1])  # the workers differ
    (again,), _ = collect(7, num_collectors=1, total_frames=50)
    (other,), _ = collect(8, num_collectors=1, total_frames=50)
    assert torch.equal(a["action"][0], again["action"].reshape(a["action"][0].shape))
    assert torch.equal(a["observation"][0], again["observation"].reshape(a["observation"][0].shape))
    assert not torch.equal(a["action"][0], other["action"].reshape(a["action"][0].shape))


def test_sync_stacks_whole_trajectories_of_different_lengths(ray_clean):
    """Each worker pads its trajectories to its longest; the stack pads to the longest of all."""
    with RayCollector(
        cartpole, None, frames_per_batch=64, total_frames=400, num_collectors=2, sync=True,
        trajs_per_batch=2, seed=0, remote_configs=SMALL,
    ) as collector:  # fmt: skip
        batches = list(collector)
        stats = collector.stats()
    assert batches and all(b.batch_size[:2] == (2, 2) for b in batches)
    assert len({b.batch_size[-1] for b in batches}) > 1  # random play: lengths differ
    for b in batches:
        mask = b[MASK_KEY]
        # each trajectory: valid frames first, then padding, and exactly one done at its end
        assert (mask.long().diff(dim=-1) <= 0).all()
        done = b["next", "done"].squeeze(-1) & mask
        assert (done.sum(-1) == 1).all()
        last = mask.sum(-1) - 1
        assert done.gather(-1, last.unsqueeze(-1)).all()
        assert (b["observation"][~mask] == 0).all()
    assert stats["frames"] == sum(int(b[MASK_KEY].sum()) for b in batches)


def test_first_ready_order_favours_the_fast_worker(ray_clean):
    slow = functools.partial(make_env, "CartPole-v1", sleep_s=0.02)
    with RayCollector(
        [slow, cartpole], mlp_policy(4, 2), frames_per_batch=50, total_frames=400,
        num_collectors=2, remote_configs=SMALL,
    ) as collector:  # fmt: skip
        ray.get([w.ping.remote() for w in collector.workers], timeout=120)  # both started
        order = [worker_ids(b)[0] for b in collector]
    # The slow worker needs >= 1 s per batch; the fast one produces several meanwhile.
    assert order[0] == 1
    assert order.count(1) > order.count(0)


@pytest.mark.fast
def test_weight_push_reaches_every_worker_and_is_stamped(ray_clean):
    policy = bias_policy(3, 1, bias=0.5)
    bias_of_version = {0: 0.5}
    with RayCollector(
        pendulum, policy, frames_per_batch=100, total_frames=1600, num_collectors=2,
        remote_configs=SMALL,
    ) as collector:  # fmt: skip
        seen = []
        for i, batch in enumerate(collector):
            seen.append((single(batch[POLICY_VERSION_KEY]), single(batch["action"])))
            if i == 3:
                collector.update_policy_weights_(bias_policy(3, 1, bias=-1.0))
                bias_of_version[1] = -1.0
                assert collector.wait_for_weights(timeout_s=60) == [1, 1]
                assert collector.stats()["worker_policy_versions"] == [1, 1]
        assert collector.policy_version == 1
    for version, action in seen:
        assert action == pytest.approx(bias_of_version[version])
    assert seen[-1][0] == 1


def test_update_after_each_batch_sync_pushes_the_trained_policy(ray_clean):
    policy = bias_policy(3, 1, bias=0.0)
    with RayCollector(
        pendulum, policy, frames_per_batch=40, total_frames=200, num_collectors=2,
        sync=True, update_after_each_batch=True, remote_configs=SMALL,
    ) as collector:  # fmt: skip
        for i, batch in enumerate(collector):
            # Collected after the push that followed "training" on the previous batch.
            assert single(batch["action"]) == pytest.approx(0.1 * i)
            assert single(batch[POLICY_VERSION_KEY]) == i
            with torch.no_grad():
                policy.module.bias.fill_(0.1 * (i + 1))  # "training"
    assert collector.stats()["weight_pushes"] == 4


def test_max_weight_update_interval_pushes_every_k_plus_one_batches(ray_clean):
    policy = bias_policy(3, 1, bias=0.0)
    with RayCollector(
        pendulum, policy, frames_per_batch=20, total_frames=120, num_collectors=1,
        max_weight_update_interval=1, remote_configs=SMALL,
    ) as collector:  # fmt: skip
        action_of_version = {}
        for i, batch in enumerate(collector):
            version, action = single(batch[POLICY_VERSION_KEY]), single(batch["action"])
            assert action_of_version.setdefault(version, action) == action
            with torch.no_grad():
                policy.module.bias.fill_(float(i + 1))
        # 6 batches from one worker, a push after every 2nd, except after the last
        # (no batch would use it): versions 1 and 2.
        assert collector.stats()["weight_pushes"] == 2
    assert sorted(action_of_version) == sorted(set(action_of_version))  # versions increase
    assert len(set(action_of_version.values())) == len(action_of_version)


def test_max_policy_lag_zero_yields_only_current_weights(ray_clean):
    policy = bias_policy(3, 1, bias=0.0)
    with RayCollector(
        pendulum, policy, frames_per_batch=50, total_frames=500, num_collectors=1,
        max_policy_lag=0, prefetch_batches=1, remote_configs=SMALL,
    ) as collector:  # fmt: skip
        for i, batch in enumerate(collector):
            assert single(batch[POLICY_VERSION_KEY]) == collector.policy_version
            assert_books_agree(collector)
            with torch.no_grad():
                policy.module.bias.fill_(float(i + 1))
            collector.update_policy_weights_()
        stats = collector.stats()
    assert stats["policy_lag_max"] == 0
    assert stats["frames"] == 500
    assert stats["frames_dropped"] > 0  # prefetched batches became stale and were counted
    assert_ledger(stats, yielded=500, dropped=stats["frames_dropped"])


def test_preemption_cuts_a_sleeping_straggler(ray_clean):
    slow = functools.partial(make_env, "CartPole-v1", sleep_s=0.05)
    with RayCollector(
        [slow, cartpole], mlp_policy(4, 2), frames_per_batch=200, total_frames=600,
        num_collectors=2, sync=True,
        preemption={"fraction_workers": 0.5, "fraction_samples": 0.5},
        remote_configs=SMALL,
    ) as collector:  # fmt: skip
        batches = []
        for batch in collector:
            assert_books_agree(collector)
            batches.append(batch)
        stats = collector.stats()
    for b in batches[:-1]:  # the last one is cut to fit total_frames
        assert tuple(b.batch_size) == (2, 100)
        mask = b[MASK_KEY]
        assert mask[1].all()  # the fast worker always completes
        assert 1 <= mask[0].sum() < 100  # the sleeper (5 s per full rollout) is cut short
        assert (b["observation"][0][~mask[0]] == 0).all()  # padding is zeros
    valid = sum(int(b[MASK_KEY].sum()) for b in batches)
    assert stats["frames"] == valid == 600  # the last batch's surplus is unmasked
    not_yielded = stats["frames_preempted"] + stats["frames_discarded"]
    assert not_yielded == len(batches) * 200 - valid
    assert_ledger(stats, yielded=valid, preempted=stats["frames_preempted"])


def test_ledger_asks_the_batch_torchrl_rounds_to_whole_env_steps(ray_clean):
    """3 envs, 100 frames per batch: torchrl collects 34 steps (102 frames); that is the ask."""
    batched = functools.partial(make_env, "CartPole-v1", num_envs=3)
    with RayCollector(
        batched, mlp_policy(4, 2), frames_per_batch=100, total_frames=300, num_collectors=1,
        remote_configs=SMALL,
    ) as collector:  # fmt: skip
        sizes = []
        for batch in collector:
            assert_books_agree(collector)
            sizes.append(batch.numel())
        stats = collector.stats()
    assert sizes == [102, 102, 96]  # the last batch cut to whole steps that fit
    assert stats["ledger"]["asked"] % 102 == 0
    assert_ledger(stats, yielded=300, discarded=stats["ledger"]["asked"] - 300)


@pytest.mark.parametrize("sync", [False, True])
def test_a_new_iteration_supersedes_an_open_one_and_books_its_requests(ray_clean, sync):
    collector = RayCollector(
        cartpole, mlp_policy(4, 2), frames_per_batch=100, total_frames=1000, sync=sync,
        num_collectors=1, remote_configs=SMALL,
    )  # fmt: skip
    first = iter(collector)
    frames = next(first).numel()
    second = iter(collector)
    frames += next(second).numel()
    assert_books_agree(collector)
    with pytest.raises(StopIteration):
        next(first)  # superseded: it ends, and leaves the workers to the second
    assert_books_agree(collector)
    frames += sum(batch.numel() for batch in second)
    stats = collector.stats()
    assert frames == stats["frames"] == 1000
    assert_ledger(stats, yielded=1000)
    assert stats["ledger"]["discarded"] >= 100  # the first one's requests in flight


def test_compressed_transport_gives_the_same_keys(cartpole_worker, ray_clean):
    received = cartpole_worker.stats()["bytes_received"]
    batch = next(iter(cartpole_worker))
    assert batch["observation"].shape == (100, 4)
    assert batch["next", "done"].dtype == torch.bool
    assert cartpole_worker.stats()["bytes_received"] > received


def test_start_without_a_buffer_names_the_argument(cartpole_worker, ray_clean):
    with pytest.raises(RuntimeError, match="replay_buffer=None"):
        cartpole_worker.start()
    assert not cartpole_worker.is_running


@pytest.mark.parametrize("collector_class", [None, "Collector"])
def test_a_killed_worker_is_rebuilt_with_current_weights_and_what_is_left_of_its_random_share(
    ray_clean, collector_class
):
    """A killed worker is replaced with the current weights and version, and takes random
    actions only for what is left of the run's share: init_random_frames is a run's warm-up,
    not each actor's (found by the off-policy soak: every collector restart wrote its random
    share again and the training return dipped)."""
    from torchrl.collectors import Collector

    chosen = {} if collector_class is None else {"collector_class": Collector}
    with RayCollector(
        pendulum, bias_policy(3, 1, bias=0.5), frames_per_batch=100, total_frames=1000,
        init_random_frames=200, remote_configs=SMALL, **chosen,
    ) as collector:  # fmt: skip
        random_batches, after_kill = [], []
        for i, batch in enumerate(collector):
            assert_books_agree(collector)
            policy_actions = any(
                torch.isclose(batch["action"], torch.tensor(bias)).all() for bias in (0.5, -0.25)
            )
            random_batches += [] if policy_actions else [i]
            if i == 3:  # past the share of 200 random frames: new weights, then the worker dies
                collector.update_policy_weights_(bias_policy(3, 1, bias=-0.25))
                collector.wait_for_weights(timeout_s=60)
                kill_and_wait(collector.workers[0])
            elif i > 3:
                after_kill.append(batch)
            if i == 6:  # its frame count goes on from its predecessor's (as a checkpoint holds)
                assert collector.state_dict()[0]["frames"] >= 600
        stats = collector.stats()
    assert stats["restarts_per_worker"] == [1] and stats["frames"] == 1000
    assert stats["frames_lost"] % 100 == 0
    assert_ledger(stats, yielded=1000, lost=stats["frames_lost"])
    assert random_batches == [0, 1]  # the first actor's 200 frames, none after
    assert single(after_kill[-1]["action"]) == pytest.approx(-0.25)  # the replacement's
    assert single(after_kill[-1][POLICY_VERSION_KEY]) == 1


def test_a_failing_worker_beside_a_healthy_one_is_named_with_the_remote_traceback(ray_clean):
    """An env that raises after every restart: rebuilt max_restarts times, then a WorkerError.

    Resting is for hangs: the failing worker does not rest while the healthy one collects the
    whole budget (a rest would begin at its second failure in a row, hence max_restarts=2);
    its third failure ends the run, named, with the remote traceback.
    """
    slow = functools.partial(make_env, "CartPole-v1", sleep_s=0.005)  # 20,000 frames: ~100 s
    failing = functools.partial(make_env, "CartPole-v1", raise_at_step=30)
    collector = RayCollector(
        [slow, failing], mlp_policy(4, 2), frames_per_batch=50, total_frames=20_000,
        num_collectors=2, max_restarts=2, worker_stall_timeout_s=600, remote_configs=SMALL,
    )  # fmt: skip
    seen = 0
    with pytest.raises(WorkerError) as info:
        for batch in collector:
            seen += batch.numel()
    assert info.value.worker_id == 1 and info.value.method == "collect" and seen < 20_000
    assert str(info.value).splitlines()[0] == (
        "collector worker 1: collect raised RuntimeError: FaultyEnv: injected failure at step 30 "
        "(failed 3 times, max_restarts=2)"
    )
    assert collector.stats()["restarts_per_worker"] == [0, 2]
    assert "injected failure at step 30" in info.value.remote_traceback
    assert "ray::CollectorWorker.collect()" in info.value.remote_traceback
    assert "faulty.py" in info.value.remote_traceback  # the remote frames are there (the env's)
    collector.shutdown()


def test_crashing_worker_gives_up_after_max_restarts(ray_clean):
    crashing = functools.partial(make_env, "CartPole-v1", exit_at_step=20)
    collector = RayCollector(
        crashing, mlp_policy(4, 2), frames_per_batch=50, total_frames=10_000,
        num_collectors=1, max_restarts=1, remote_configs=SMALL,
    )  # fmt: skip
    with pytest.raises(WorkerError, match=r"died 2 times \(max_restarts=1\)"):
        for _ in collector:
            pass
    assert collector.stats()["restarts"] == 1
    collector.shutdown()


def test_state_dict_round_trip_and_add_collectors(ray_clean):
    with RayCollector(
        cartpole, mlp_policy(4, 2), frames_per_batch=50, total_frames=-1, num_collectors=1,
        remote_configs=SMALL,
    ) as collector:  # fmt: skip
        it = iter(collector)
        next(it)
        collector.update_policy_weights_()
        state = collector.state_dict()
        driver = state[0]["tdscheme"]["driver"]
        assert driver == {"frames": 50, "batches": 1, "policy_version": 1, "env_config_version": 0}
        collector.load_state_dict(state)  # the request in flight stays booked
        assert_books_agree(collector)
        assert collector._stats.ledger.in_flight == 50
        assert collector.policy_version == 1
        assert collector.add_collectors([cartpole], remote_configs=SMALL) == [1]
        ray.get(collector.workers[1].ping.remote(), timeout=120)  # started
        seen = set()
        for _ in range(12):
            seen.update(worker_ids(next(it)))
        assert seen == {0, 1}
        assert collector.set_seed(3) not in (3, collector._pool.worker_seed(1))  # chains on
        # A budget set while iterating: 70 more frames, the second batch cut to fit.
        with pytest.raises(ValueError, match="total_frames=-2 is invalid; accepted: an int >= 0"):
            collector.set_total_frames(-2)
        assert collector.frames_left is None
        collector.set_total_frames(collector.collected_frames + 70)
        assert [b.numel() for b in it] == [50, 20] and collector.frames_left == 0
        assert_ledger(collector.stats(), yielded=collector.collected_frames)


def test_workers_log_at_the_drivers_level_and_shutdown_leaves_the_ray_it_did_not_start(
    cartpole_worker, ray_clean
):
    """A worker logs at the level the driver had when it started it (the shared worker was
    started at WARNING, this test's at INFO). That worker's collector is then shut down (twice):
    the session's Ray stays up and the collector refuses further calls."""

    # torchrl's own default is INFO: WARNING in a worker is the driver's, not torchrl's.
    def levels_in_worker(worker):  # a local function: Ray sends it by value
        return {n: logging.getLogger(n).getEffectiveLevel() for n in ("tdscheme", "torchrl", "ray")}

    def levels_of(collector):
        return ray.get(collector.workers[0].__ray_call__.remote(levels_in_worker), timeout=120)

    warning = logging.WARNING
    assert levels_of(cartpole_worker) == {"tdscheme": warning, "torchrl": warning, "ray": warning}
    tdscheme_logger = logging.getLogger("tdscheme")
    previous = tdscheme_logger.level
    tdscheme_logger.setLevel(logging.INFO)
    try:
        collector = RayCollector(
            cartpole, mlp_policy(4, 2), frames_per_batch=20, num_collectors=1,
            remote_configs=SMALL,
        )  # fmt: skip
    finally:
        tdscheme_logger.setLevel(previous)
    try:
        got = levels_of(collector)
    finally:
        collector.shutdown()
    info = logging.INFO
    assert got == {"tdscheme": info, "torchrl": info, "ray": info}
    collector.shutdown()
    assert ray.is_initialized()
    with pytest.raises(RuntimeError, match="shut down"):
        collector.update_policy_weights_()


def test_first_ready_serves_the_oldest_ready_batch_first(ray_clean):
    """A consumer slower than its workers finds several batches ready: oldest first.

    ``ray.wait`` hands back any ready future; without the ordering a batch could wait
    behind dozens of newer ones (policy lags of 20-60 pushes were seen in a Pong run).
    With 2 workers 2 requests ahead, a batch is at most a few pushes old.
    """
    import time

    policy = bias_policy(3, 1)
    pendulum = functools.partial(make_env, "Pendulum-v1")
    with RayCollector(
        pendulum, policy, frames_per_batch=20, total_frames=20 * 40, num_collectors=2,
        sync=False, prefetch_batches=2, remote_configs={"num_cpus": 0.5},
    ) as collector:  # fmt: skip
        lags = []
        for batch in collector:
            lags.append(collector.policy_version - int(batch[POLICY_VERSION_KEY].min()))
            time.sleep(0.05)  # slower than the workers: their batches wait, ready
            collector.update_policy_weights_(policy)
    assert len(lags) == 40
    assert max(lags) <= 5, lags
