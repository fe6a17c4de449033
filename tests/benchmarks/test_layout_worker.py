"""benchmarks/layout_worker.py's MinimalLayoutWorker: torchrl's layout by hand, the same transitions in every
autoreset mode (a NEXT_STEP env's reset steps masked out, a SAME_STEP env's final observations put back)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.benchmarks.scripts import load_script


@pytest.fixture(scope="module")
def layout():
    load_script("peers")
    return load_script("layout_worker")


KEYS = ("observation", "action", "next/observation", "next/reward", "next/terminated",
        "next/truncated")  # fmt: skip


def transitions(layout, mode: str, num_envs: int = 4, steps: int = 150):
    worker = layout.MinimalLayoutWorker(
        "CartPole-v1", num_envs, num_envs * steps, autoreset_mode=mode
    )
    try:
        batches = [worker.next() for _ in range(2)]  # a batch boundary inside episodes
    finally:
        worker.close()
    rows = []
    for env in range(num_envs):
        keep = np.concatenate([b["mask"][env] for b in batches])
        rows.append({k: np.concatenate([b[k][env] for b in batches])[keep] for k in KEYS})
    return rows, batches


def test_every_autoreset_mode_gives_the_disabled_envs_transitions(layout):
    disabled, batches = transitions(layout, "DISABLED")
    assert batches[0]["observation"].shape == (4, 150, 4) and batches[0]["mask"].all()
    assert batches[0]["action"].shape == (4, 150, 2)
    assert batches[0]["next/reward"].shape == (4, 150, 1)
    assert 10 < sum(r["next/terminated"].sum() for r in disabled)  # many episodes ended
    same_step, _ = transitions(layout, "SAME_STEP")
    next_step, next_batches = transitions(layout, "NEXT_STEP")
    assert not next_batches[0]["mask"].all()  # reset steps, masked
    for d, s, n in zip(disabled, same_step, next_step, strict=True):
        for key in KEYS:
            np.testing.assert_array_equal(s[key], d[key], err_msg=f"SAME_STEP {key}")
            length = len(n[key])  # NEXT_STEP's reset steps took some of the batch's steps
            np.testing.assert_array_equal(n[key], d[key][:length], err_msg=f"NEXT_STEP {key}")
        # each transition's next observation is the next one's observation, but at an episode end
        cont = ~(d["next/terminated"] | d["next/truncated"])[:-1, 0]
        np.testing.assert_array_equal(d["next/observation"][:-1][cont], d["observation"][1:][cont])
        assert not np.array_equal(d["next/observation"][:-1][~cont], d["observation"][1:][~cont])


def test_frames_in_counts_a_numpy_batch_by_its_mask(layout):
    harness = load_script("harness")
    _, batches = transitions(layout, "NEXT_STEP", steps=50)
    assert harness.frames_in(batches[0]) == int(batches[0]["mask"].sum()) < 4 * 50
    assert harness.frames_in({"reward": np.zeros((3, 5))}) == 15


def test_the_plain_worker_masks_the_same_reset_steps(layout):
    peers = load_script("peers")
    _, batches = transitions(layout, "NEXT_STEP", steps=50)
    plain = peers.MinimalCollectorWorker("CartPole-v1", 4, 4 * 50, autoreset_mode="NEXT_STEP")
    try:
        masks = [plain.next()["mask"] for _ in range(2)]  # time-major: [steps, envs]
    finally:
        plain.close()
    for mask, batch in zip(masks, batches, strict=True):
        np.testing.assert_array_equal(mask.T, batch["mask"])
    assert not masks[0].all()
    disabled = peers.MinimalCollectorWorker("CartPole-v1", 4, 4 * 50, autoreset_mode="DISABLED")
    try:
        assert "mask" not in disabled.next()  # every step a transition
    finally:
        disabled.close()


def reference_ids(dones, num_envs: int) -> list[np.ndarray]:
    """Per batch, ``[envs, steps]`` ids by a loop: new ids in (step, copy) order after each end."""
    current, counter, out = list(range(num_envs)), num_envs, []
    for done in dones:
        ids = np.empty(done.shape, dtype=np.int64)
        for t in range(done.shape[1]):
            ids[:, t] = current
            for env in range(num_envs):
                if done[env, t]:
                    current[env], counter = counter, counter + 1
        out.append(ids)
    return out


@pytest.mark.parametrize("index_actions", [True, False])
def test_the_tdscheme_layout_worker_packs_the_same_transitions_with_ids_and_stamps(
    layout, index_actions
):
    """TdschemeLayoutWorker: MinimalLayoutWorker's transitions (same seed), each row packed to its
    front with zeros behind, trajectory ids handed out in (step, copy) order, the stamps."""
    kwargs = {"autoreset_mode": "NEXT_STEP", "index_actions": index_actions, "seed": 3}
    plain = layout.MinimalLayoutWorker("CartPole-v1", 4, 4 * 50, **kwargs)
    full = layout.TdschemeLayoutWorker("CartPole-v1", 4, 4 * 50, **kwargs)
    try:
        theirs = [plain.next() for _ in range(3)]
        ours = [full.next() for _ in range(3)]
    finally:
        plain.close()
        full.close()
    assert theirs[0]["action"].shape == ((4, 50) if index_actions else (4, 50, 2))
    wanted_ids = reference_ids([t["next/done"][..., 0] for t in theirs], 4)
    for mine, their, ids in zip(ours, theirs, wanted_ids, strict=True):
        count = their["mask"].sum(1)
        assert count.min() < 50  # reset steps were packed out
        np.testing.assert_array_equal(mine["mask"], np.arange(50) < count[:, None])
        for key in (*KEYS, "next/done", "action"):
            for env in range(4):
                np.testing.assert_array_equal(
                    mine[key][env][: count[env]], their[key][env][their["mask"][env]]
                )
                assert not mine[key][env][count[env] :].any(), key  # zeros behind the transitions
        for env in range(4):
            np.testing.assert_array_equal(
                mine["collector/traj_ids"][env][: count[env]], ids[env][their["mask"][env]]
            )
        assert (mine["collector/worker_id"] == 3).all() and (mine["collector/env_task"] == -1).all()
        assert not mine["done"].any() and set(layout.STAMPS) <= set(mine)
