"""tdscheme's sum tree and SumTreeSampler hold torchrl's PrioritizedSampler semantics."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

from tdscheme.replay.prioritized import (
    SegmentTree,
    SumTreeSampler,
    extension_loads,
    prioritized_buffer,
    prioritized_sampler,
)

#: chi-square's 0.99 quantile with 9 degrees of freedom (10 bins), from the standard tables
CHI2_99_DF9 = 21.666


def _chi_square(counts: np.ndarray, expected_p: np.ndarray) -> float:
    expected = expected_p * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def _buffer(sampler: PrioritizedSampler, capacity: int, frames: int, seed: int = 0):
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=sampler,
        generator=torch.Generator().manual_seed(seed),
    )
    buffer.extend(TensorDict({"obs": torch.arange(float(frames))}, [frames]))
    return buffer


@pytest.mark.parametrize("operation", ["sum", "min"])
@pytest.mark.parametrize("size", [1, 5, 64, 1000])
def test_segment_tree_matches_brute_force(operation, size):
    rng = np.random.default_rng(size)
    tree = SegmentTree(size, operation)
    reference = np.full(size, 0.0 if operation == "sum" else np.inf)
    for step in range(30):
        index = rng.integers(0, size, rng.integers(1, 20))
        value = rng.random(index.size) * 10
        if step % 7 == 3:  # single writes, as torchrl's loads makes them
            for i, v in zip(index, value, strict=True):
                tree[int(i)] = v
                reference[i] = v
        else:
            tree[torch.as_tensor(index)] = torch.as_tensor(value)
            for i, v in zip(index, value, strict=True):  # sequential: a repeated index keeps its last value
                reference[i] = v
        left, right = sorted(rng.integers(0, size + 1, 2))
        if left < right:
            ref = reference[left:right].sum() if operation == "sum" else reference[left:right].min()
            assert tree.query(left, right) == pytest.approx(ref, rel=1e-12)
    np.testing.assert_allclose(tree[np.arange(size)], reference.astype(np.float32))
    if operation == "sum":
        mass = rng.random(200) * reference.sum() * 1.1
        expected = np.minimum(np.searchsorted(np.cumsum(reference), mass, side="left"), size)
        np.testing.assert_array_equal(tree.scan_lower_bound(mass), expected)


def test_segment_tree_refuses_bad_input():
    with pytest.raises(ValueError, match="operation"):
        SegmentTree(4, "max")
    with pytest.raises(ValueError, match="size"):
        SegmentTree(0)
    with pytest.raises(IndexError):
        SegmentTree(4)[np.array([4])] = 1.0
    with pytest.raises(TypeError, match="sum tree"):
        SegmentTree(4, "min").scan_lower_bound(np.array([0.5]))


#: three priority vectors over 10 frames: uniform, one hot spot, a power law
PRIORITY_VECTORS = {
    "uniform": torch.ones(10),
    "hot spot": torch.tensor([0.5] * 7 + [40.0] + [0.5] * 2),
    "power law": 1.0 / torch.arange(1.0, 11.0) ** 2,
}


def _draw_counts(sampler: SumTreeSampler, priority: torch.Tensor, draws: int = 100_000) -> np.ndarray:
    buffer = _buffer(sampler, 10, 10, seed=7)
    buffer.update_priority(torch.arange(10), priority)
    index = torch.cat([buffer.sample(10_000)["index"] for _ in range(draws // 10_000)])
    return np.bincount(index.numpy(), minlength=10)


@pytest.mark.parametrize("name", list(PRIORITY_VECTORS))
def test_sampling_frequencies_follow_priority_to_the_alpha(name):
    """100 k draws pass a chi-square test at p >= 0.01; a sampler ignoring alpha fails it."""
    alpha, priority = 0.7, PRIORITY_VECTORS[name]
    expected = ((priority + 1e-8) ** alpha).numpy()
    expected = expected / expected.sum()
    counts = _draw_counts(SumTreeSampler(10, alpha=alpha, beta=0.5), priority)
    assert _chi_square(counts, expected) < CHI2_99_DF9
    if name != "uniform":  # the negative control: draws by p (alpha ignored) fail the same test
        ignoring_alpha = _draw_counts(SumTreeSampler(10, alpha=1.0, beta=0.5), priority)
        assert _chi_square(ignoring_alpha, expected) > CHI2_99_DF9


def test_importance_weights_are_n_p_to_the_minus_beta_over_their_max():
    alpha, beta, capacity = 0.6, 0.4, 16
    priority = torch.linspace(0.1, 3.0, capacity)
    buffer = _buffer(SumTreeSampler(capacity, alpha=alpha, beta=beta), capacity, capacity)
    buffer.update_priority(torch.arange(capacity), priority)
    sample = buffer.sample(256)
    p = (priority.double() + 1e-8) ** alpha
    probability = p / p.sum()
    weight = (capacity * probability) ** -beta
    expected = (weight / weight.max())[sample["index"]]
    torch.testing.assert_close(sample["priority_weight"].double(), expected, rtol=1e-5, atol=0)
    assert sample["priority_weight"].dtype == torch.float32


def test_priorities_updated_by_index_and_new_frames_at_the_max():
    capacity = 8
    sampler = SumTreeSampler(capacity, alpha=1.0, beta=1.0)
    buffer = _buffer(sampler, capacity, 4)
    buffer.update_priority(torch.tensor([0, 1, 2, 3]), torch.tensor([0.0, 0.0, 7.0, 0.0]))
    assert set(buffer.sample(64)["index"].tolist()) == {2}
    buffer.update_priority(torch.tensor([2, 3]), torch.tensor([0.0, 9.0]))
    assert set(buffer.sample(64)["index"].tolist()) == {3}
    # a new frame comes in at the max priority seen (9), beside frame 3
    buffer.extend(TensorDict({"obs": torch.tensor([4.0])}, [1]))
    assert float(sampler._sum_tree[4]) == pytest.approx(9.0)
    assert set(buffer.sample(256)["index"].tolist()) == {3, 4}


def test_capacity_wrap_around_overwrites_priorities():
    capacity = 6
    sampler = SumTreeSampler(capacity, alpha=1.0, beta=1.0)
    buffer = _buffer(sampler, capacity, capacity)
    buffer.update_priority(torch.arange(capacity), torch.tensor([5.0, 5.0, 1e-6, 1e-6, 1e-6, 1e-6]))
    assert sampler._sum_tree.query(0, capacity) == pytest.approx(10.0, rel=1e-4)
    buffer.extend(TensorDict({"obs": torch.tensor([10.0, 11.0])}, [2]))  # slots 0 and 1 again
    assert len(buffer) == capacity
    assert buffer[torch.tensor([0, 1])]["obs"].tolist() == [10.0, 11.0]
    buffer.update_priority(torch.tensor([0, 1]), torch.tensor([1e-6, 1e-6]))
    buffer.update_priority(torch.tensor([4]), torch.tensor([3.0]))
    assert set(buffer.sample(128)["index"].tolist()) == {4}


@pytest.mark.parametrize("how", ["state_dict", "dumps"])
def test_checkpoint_round_trip_keeps_priorities(tmp_path, how):
    capacity = 32
    priority = torch.rand(capacity, generator=torch.Generator().manual_seed(1)) * 4
    source = _buffer(SumTreeSampler(capacity, alpha=0.6, beta=0.4), capacity, capacity)
    source.update_priority(torch.arange(capacity), priority)
    target = _buffer(SumTreeSampler(capacity, alpha=0.6, beta=0.4), capacity, capacity)
    if how == "state_dict":
        target.load_state_dict(source.state_dict())
    else:
        source.dumps(tmp_path / "buffer")
        target.loads(tmp_path / "buffer")
    tree, loaded = source.sampler._sum_tree, target.sampler._sum_tree
    np.testing.assert_allclose(loaded[np.arange(capacity)], tree[np.arange(capacity)])
    assert loaded.query(0, capacity) == pytest.approx(tree.query(0, capacity), rel=1e-6)
    assert target.sampler._min_tree.query(0, capacity) == pytest.approx(
        source.sampler._min_tree.query(0, capacity), rel=1e-6
    )
    assert float(target.sampler.default_priority) == pytest.approx(float(priority.max()))
    source.set_rng(torch.Generator().manual_seed(5))
    target.set_rng(torch.Generator().manual_seed(5))
    torch.testing.assert_close(source.sample(64)["index"], target.sample(64)["index"])


def test_alpha_annealing_retransforms_the_trees():
    capacity = 4
    sampler = SumTreeSampler(capacity, alpha=1.0, beta=1.0, eps=0.0)
    buffer = _buffer(sampler, capacity, capacity)
    buffer.update_priority(torch.arange(capacity), torch.tensor([1.0, 4.0, 9.0, 16.0]))
    sampler.alpha = 0.5
    np.testing.assert_allclose(
        sampler._sum_tree[np.arange(capacity)], [1.0, 2.0, 3.0, 4.0], rtol=1e-5
    )
    assert sampler._sum_tree.query(0, capacity) == pytest.approx(10.0, rel=1e-5)


def test_prioritized_buffer_and_chooser():
    buffer = prioritized_buffer(size=50, batch_size=4, alpha=0.5, beta=0.3)
    assert isinstance(buffer.sampler, PrioritizedSampler)
    assert isinstance(buffer.sampler, SumTreeSampler) is not extension_loads()
    buffer.extend(TensorDict({"obs": torch.zeros(10, 2), "td_error": torch.arange(10.0)}, [10]))
    sample = buffer.sample()
    assert sample.batch_size == (4,) and "priority_weight" in sample.keys()
    sample["td_error"] = torch.full(
        (4,), 1e4
    )  # (1e4) ** 0.5 = 100 each; the other 6 frames hold <= 3 each
    buffer.update_tensordict_priority(sample)
    drawn = torch.cat([buffer.sample()["index"] for _ in range(50)])
    assert torch.isin(drawn, sample["index"]).float().mean() > 0.85
    with pytest.raises(ValueError, match="device"):
        SumTreeSampler(8, alpha=0.5, beta=0.5, device="cuda")
    assert isinstance(prioritized_sampler(8, 0.5, 0.5), PrioritizedSampler)


@pytest.mark.skipif(
    not extension_loads(), reason="torchrl's C++ extension does not load with this torch"
)
def test_same_draws_as_torchrl_sampler():
    capacity = 64
    priority = torch.rand(capacity, generator=torch.Generator().manual_seed(2)) * 3
    ours = _buffer(SumTreeSampler(capacity, alpha=0.6, beta=0.4), capacity, capacity, seed=3)
    theirs = _buffer(PrioritizedSampler(capacity, alpha=0.6, beta=0.4), capacity, capacity, seed=3)
    for buffer in (ours, theirs):
        buffer.update_priority(torch.arange(capacity), priority)
    a, b = ours.sample(512), theirs.sample(512)
    torch.testing.assert_close(a["index"], b["index"])
    torch.testing.assert_close(a["priority_weight"], b["priority_weight"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_a_corrupt_priority_is_refused_naming_its_index_and_the_tree_is_unchanged(bad):
    sampler = SumTreeSampler(8, alpha=0.6, beta=0.4)
    buffer = _buffer(sampler, 8, 8)
    buffer.update_priority(torch.arange(8), torch.arange(1.0, 9.0))
    before = sampler._sum_tree[np.arange(8)].copy(), sampler._sum_tree.query(0, 8)
    with pytest.raises(ValueError, match=r"for the frame at index 5 is invalid .*no priority"):
        buffer.update_priority(torch.tensor([2, 5, 6]), torch.tensor([3.0, bad, 1.0]))
    np.testing.assert_array_equal(sampler._sum_tree[np.arange(8)], before[0])
    assert sampler._sum_tree.query(0, 8) == before[1]


def test_a_multi_dim_storages_index_is_updated_where_torchrl_puts_it_and_quietly():
    # a Ray-held buffer stores [time, env] rows: its samples carry [B, 2] indices; torchrl
    # ravels them through numpy, which warned at every learner step on the user's terminal
    sampler = SumTreeSampler(12, alpha=1.0, beta=1.0)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(12, ndim=2), sampler=sampler)
    buffer.extend(TensorDict({"obs": torch.arange(12.0).reshape(4, 3)}, [4, 3]))
    assert tuple(buffer._storage.shape) == (3, 4)  # torchrl lays the 12 frames out [3, 4]
    index = torch.tensor([[0, 0], [1, 2], [2, 3]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        buffer.update_priority(index, torch.tensor([0.5, 2.0, 3.0]))
    tree = torch.tensor([float(sampler._sum_tree[i]) for i in range(12)])
    assert tree[[0, 6, 11]].tolist() == pytest.approx([0.5, 2.0, 3.0])  # row-major: 4 r + c
    assert tree[[1, 2, 3, 4, 5, 7, 8, 9, 10]].tolist() == pytest.approx([1.0] * 9)
