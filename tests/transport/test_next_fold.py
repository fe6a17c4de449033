"""Each observation once on the wire: ("next", obs) folded by the codec, rebuilt bit for bit."""

from __future__ import annotations

import functools
import pickle

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

from tdscheme import RayCollector
from tdscheme.testing import make_env
from tdscheme.transport import TensorDictCodec
from tdscheme.transport.next_fold import folded_keys

SMALL = {"num_cpus": 0.5}


def bits(x: torch.Tensor) -> torch.Tensor:
    """``x`` as integers of its size: equal bits, not equal values (NaN, -0.0)."""
    if x.dtype == torch.bool:
        return x.view(torch.uint8)
    return x.view(
        {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    )


def assert_bitwise_equal(got: TensorDict, want: TensorDict) -> None:
    assert list(got.keys(True, True)) == list(want.keys(True, True))  # torchrl's order too
    assert got.batch_size == want.batch_size and got.names == want.names
    for key in want.keys(True, True):
        a, b = got.get(key), want.get(key)
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert torch.equal(bits(a), bits(b)), key


def rollout_like(
    shape: tuple[int, ...], frame: tuple[int, ...], dtype: torch.dtype, ends: list, seed: int = 0
) -> TensorDict:
    """A batch in torchrl's layout (time last) whose episodes end where ``ends`` says:
    ``("next", obs)[..., t]`` is ``obs[..., t + 1]`` except at an end (a reset follows)."""
    g = torch.Generator().manual_seed(seed)
    steps = shape[-1]
    stream = torch.randn(*shape[:-1], steps + 1, *frame, generator=g)
    if dtype == torch.uint8:
        stream = (stream * 60).clamp(0, 255).to(torch.uint8)
    elif dtype == torch.bool:
        stream = stream > 0
    else:
        stream = stream.to(dtype)
    current = stream.narrow(len(shape) - 1, 0, steps).clone()
    nxt = stream.narrow(len(shape) - 1, 1, steps).clone()
    for index in ends:  # the final observation of an episode: not the next step's (a reset)
        nxt[index] = torch.full(frame, 7).to(dtype)
    done = torch.zeros(*shape, 1, dtype=torch.bool)
    return TensorDict(
        {"pixels": current, "action": torch.randn(*shape, 2, generator=g),
         "next": {"pixels": nxt, "reward": torch.randn(*shape, 1, generator=g), "done": done}},
        batch_size=shape, names=[*[None] * (len(shape) - 1), "time"],
    )  # fmt: skip


def round_trip(td: TensorDict, fold_next_bytes: int | None = 0) -> tuple[TensorDict, object]:
    codec = TensorDictCodec(fold_next_bytes=fold_next_bytes)
    payload = pickle.loads(pickle.dumps(codec.encode(td), protocol=5))
    return codec.decode(payload), payload


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16, torch.bool])
@pytest.mark.parametrize(
    "shape,ends",
    [((3, 8), [(0, 2), (2, 7), (1, 0)]), ((8,), [(3,)]), ((2, 2, 5), [(1, 0, 4)]), ((4, 1), [])],
)
def test_a_folded_batch_comes_back_bit_for_bit_with_fewer_bytes(dtype, shape, ends):
    td = rollout_like(shape, (4, 6), dtype, ends)
    out, payload = round_trip(td)
    assert_bitwise_equal(out, td)
    assert folded_keys(payload) == ["next.pixels"]
    whole = TensorDictCodec().encode(td).nbytes
    frame_bytes = 4 * 6 * td["pixels"].element_size()
    steps = shape[-1]
    rows = td.numel() // steps
    # one observation per frame, plus a last step per row and each end's final observation
    ends_bytes = len(ends) * (frame_bytes + 8)
    assert payload.nbytes <= whole - (rows * (steps - 1)) * frame_bytes + ends_bytes


def test_nan_negative_zero_and_nested_keys_keep_their_bits():
    td = rollout_like((2, 6), (3, 4), torch.float32, [(1, 3)])
    td["pixels"][0, 2, 0, 0] = float("nan")
    td["next", "pixels"][0, 1, 0, 0] = float("nan")  # the same step: NaN != NaN, bits equal
    td["pixels"][1, 5, 1, 1] = -0.0
    td["next", "pixels"][1, 4, 1, 1] = 0.0  # == -0.0 as values, not as bits: sent
    td["obs", "img"] = td["pixels"].clone()
    td["next", "obs", "img"] = td["next", "pixels"].clone()
    out, payload = round_trip(td)
    assert_bitwise_equal(out, td)
    assert sorted(folded_keys(payload)) == ["next.obs.img", "next.pixels"]


def test_a_next_that_never_follows_is_still_exact():
    td = rollout_like((3, 5), (8,), torch.float32, [])
    td["next", "pixels"] = torch.randn(3, 5, 8)  # e.g. a transform editing one side
    out, _ = round_trip(td)
    assert_bitwise_equal(out, td)


def test_small_frames_other_layouts_and_the_setting_stay_whole():
    td = rollout_like((3, 5), (4, 6), torch.uint8, [(0, 1)])
    assert folded_keys(round_trip(td, 25)[1]) == []  # 24 bytes a frame, 25 asked
    assert folded_keys(round_trip(td, None)[1]) == []
    flat = td.reshape(-1)  # rows run on into each other: the first of a row is not a next
    out, payload = round_trip(flat)
    assert_bitwise_equal(out, flat) and folded_keys(payload) == ["next.pixels"]
    unbatched = td[0, 0]  # no time dim
    assert folded_keys(round_trip(unbatched)[1]) == []
    wrong = TensorDict(
        {"x": torch.zeros(3, 4), "next": {"x": torch.zeros(3, 4, dtype=torch.int32)}}, [3]
    )
    assert folded_keys(round_trip(wrong)[1]) == []  # a different dtype
    with pytest.raises(ValueError, match=r"fold_next_bytes must be >= 0; got -1"):
        TensorDictCodec(fold_next_bytes=-1)
    with pytest.raises(TypeError, match=r"fold_next_bytes must be an int >= 0; got 1.5"):
        TensorDictCodec(fold_next_bytes=1.5)


pixel_cartpole = functools.partial(make_env, "CartPole-v1", obs_shape=(4, 16, 16))


def collect(num_batches: int, **kwargs) -> tuple[list[TensorDict], dict]:
    """Stacked batches of 2 workers' random actions (seeded) on 1 KiB frames that count the
    env steps (each frame distinct)."""
    kwargs = {"create_env_fn": pixel_cartpole, "num_collectors": 2, "sync": True, **kwargs}
    with RayCollector(
        policy=None, frames_per_batch=2 * 60, total_frames=-1, remote_configs=SMALL, seed=3,
        **kwargs,
    ) as collector:  # fmt: skip
        batches = []
        for batch in collector:
            batches.append(batch.clone())
            if len(batches) == num_batches:
                return batches, collector.stats()


def test_ray_collector_batches_are_the_same_with_each_frame_sent_once(ray_clean):
    folded, folded_stats = collect(3, dedup_obs=True)
    whole, whole_stats = collect(3)  # "auto", all on the driver's node: sent whole
    assert folded_stats["dedup_keys"] == ["next.observation"] and whole_stats["dedup_keys"] == []
    assert folded_stats["bytes_received"] < 0.6 * whole_stats["bytes_received"]
    ended = 0
    for got, want in zip(folded, whole, strict=True):
        assert_bitwise_equal(got, want)
        ended += int(want["next", "done"].sum())
    assert ended >= 3  # episodes ended inside the batches: their final frames came through


def test_frames_written_into_a_ray_held_buffer_are_the_same_sent_once(ray_clean):
    contents = []
    for dedup in (True, False):
        buffer = RayReplayBuffer(
            storage=functools.partial(LazyTensorStorage, 1_000), batch_size=8,
            remote_config={"num_cpus": 0},
        )  # fmt: skip
        try:
            with RayCollector(
                pixel_cartpole, None, frames_per_batch=100, total_frames=300, num_collectors=1,
                replay_buffer=buffer, remote_configs=SMALL, seed=3, dedup_obs=dedup,
            ) as collector:  # fmt: skip
                assert all(batch is None for batch in collector)
            contents.append(buffer[:])
        finally:
            buffer.shutdown()
    folded, whole = contents
    assert len(whole) == 300 and int(whole["next", "done"].sum()) >= 3
    assert_bitwise_equal(folded, whole)


@pytest.mark.parametrize(
    "variant",
    [
        # whole trajectories, zero-padded (one worker: sync=True stacks the workers' batches,
        # whose padded lengths differ, which torchrl's RayCollector refuses as well)
        {"trajs_per_batch": 4, "num_collectors": 1},
        {"step_counter": 7},  # truncation by torchrl's StepCounter every 7 steps
    ],
    ids=["trajs_per_batch", "step_counter"],
)
def test_other_layouts_come_back_the_same(ray_clean, variant):
    variant = dict(variant)
    if "step_counter" in variant:
        steps = variant.pop("step_counter")

        def truncated():  # local: Ray ships it by value (the test module is not importable there)
            from torchrl.envs import StepCounter, TransformedEnv

            return TransformedEnv(pixel_cartpole(), StepCounter(steps))

        variant = {**variant, "create_env_fn": truncated}
    # (a preempted rollout is cut in the worker before encoding and padded by the driver after
    # decoding: the codec sees a shorter rollout, as in the codec tests above)
    folded, folded_stats = collect(2, dedup_obs=True, **variant)
    whole, _ = collect(2, dedup_obs=False, **variant)
    assert folded_stats["dedup_keys"] == ["next.observation"]
    for got, want in zip(folded, whole, strict=True):
        assert_bitwise_equal(got, want)


@pytest.mark.parametrize(
    "hold",
    [
        lambda t: t,
        lambda t: t[1:],  # a view
        lambda t: t.numpy(),
        lambda t: memoryview(t.numpy()),
        lambda t: t.untyped_storage(),
        lambda t: TensorDict({"x": t}, []),
        lambda t: t.view(-1).share_memory_(),  # moved to shared memory: another process may map it
    ],
    ids=["tensor", "view", "numpy", "memoryview", "storage", "tensordict", "shared"],
)
def test_a_rebuilt_leafs_memory_is_reused_only_once_nothing_holds_it(hold):
    from tdscheme.transport.next_fold import _Rebuilt

    rebuilt, shape = _Rebuilt(), (2, 1 << 20)  # over MIN_BYTES
    first = rebuilt.take(shape, torch.uint8)
    address, shared = first.data_ptr(), None
    held = hold(first)
    if isinstance(held, torch.Tensor) and held.is_shared():
        shared = held.untyped_storage().data_ptr()
    del first
    second = rebuilt.take(shape, torch.uint8)  # kept: only the first's memory may come back
    assert rebuilt.reused == 0 and (shared is not None or second.data_ptr() != address)
    del held
    third = rebuilt.take(shape, torch.uint8)
    if shared is not None:  # its memory stays shared: never handed out again
        assert rebuilt.reused == 0 and third.data_ptr() != shared
    else:
        assert rebuilt.reused == 1 and third.data_ptr() == address


def test_a_folded_pixel_batch_rebuilds_into_the_memory_of_the_last_one():
    """The driver's loop: the batch it dropped lends its memory to the next, values exact."""
    from tdscheme.transport.next_fold import _REBUILT

    codec = TensorDictCodec(fold_next_bytes=1024)
    addresses = []
    for seed in range(4):
        td = rollout_like((8, 32), (4, 64, 64), torch.uint8, ends=[(1, 5)], seed=seed)  # 4 MiB
        batch = codec.decode(codec.encode(td))
        assert_bitwise_equal(batch, td)
        addresses.append(batch["next", "pixels"].data_ptr())
        del batch
    assert addresses[1:] == addresses[:-1]
    assert _REBUILT.reused >= 3
