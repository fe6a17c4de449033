"""Tests of the TensorDict transport codec: identical round trips, zero copies, errors."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import tensordict
import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase, is_non_tensor

from tdscheme.transport import Payload, TensorDictCodec, decode_tensordict, encode_tensordict
from tdscheme.transport.compression import compress_bytes, decompress_bytes

ALL_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def _names(td: TensorDictBase) -> list[str | None] | None:
    try:
        names = td.names
    except (RuntimeError, ValueError):
        return None
    return None if names is None or all(n is None for n in names) else list(names)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor, so that every dtype (float8, NaN) compares exactly."""
    if tensor.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def assert_identical(td1: TensorDictBase, td2: TensorDictBase, path: tuple = ()) -> None:
    """Same keys (and order), dtypes, shapes, values, batch sizes, dim names and devices."""
    assert td2.batch_size == td1.batch_size, path
    assert _names(td2) == _names(td1), path
    assert td2.device == td1.device, path
    assert list(td2.keys()) == list(td1.keys()), path
    for key, value1 in td1.items():
        value2 = td2.get(key)
        where = (*path, key)
        if isinstance(value1, torch.Tensor):
            assert isinstance(value2, torch.Tensor), where
            assert value2.dtype == value1.dtype, where
            assert value2.shape == value1.shape, where
            assert value2.device.type == (td1.device or value1.device).type, where
            if value1.is_floating_point() and value1.element_size() > 1 or value1.is_complex():
                assert (value2 == value1.detach()).all(), where
            assert (_bits(value2) == _bits(value1)).all(), where
        elif is_non_tensor(value1):
            assert is_non_tensor(value2), where
            assert type(value2) is type(value1), where
            assert value2.batch_size == value1.batch_size, where
            assert value2.tolist() == value1.tolist(), where
        else:
            assert isinstance(value2, TensorDictBase), where
            assert_identical(value1, value2, where)


def roundtrip(td: TensorDictBase, **codec_kwargs) -> TensorDict:
    codec = TensorDictCodec(**codec_kwargs)
    out = codec.decode(codec.encode(td))
    assert isinstance(out, TensorDict)
    return out


def pickle5(payload: Payload, *, read_only: bool = True) -> tuple[bytes, Payload]:
    """Pickles like Ray: buffers out of band, handed back read-only."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append)
    views = [b.raw().toreadonly() if read_only else b.raw() for b in buffers]
    return data, pickle.loads(data, buffers=views)


@pytest.fixture(scope="module")
def rollout() -> TensorDict:
    from torchrl.envs import GymEnv

    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    try:
        return env.rollout(20)
    finally:
        env.close()


# ---- round trips -------------------------------------------------------------------------


def test_nested_and_empty_subtensordicts():
    td = TensorDict(
        {
            "a": torch.randn(4, 3),
            "b": {"c": torch.arange(4), "d": {"e": torch.ones(4, 2, 2)}, "empty": {}},
            "wide": TensorDict({"x": torch.zeros(4, 5, 6)}, [4, 5]),
            "empty_wide": TensorDict({}, [4, 7]),
        },
        batch_size=[4],
    )
    assert_identical(td, roundtrip(td))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype(dtype):
    source = torch.randn(5, 3) * 10
    td = TensorDict({"x": source.to(dtype), "scalar": source[0, 0].to(dtype)}, [])
    out = roundtrip(td)
    assert_identical(td, out)
    assert_identical(td, roundtrip(td, compress=True))


def test_named_dims():
    td = TensorDict({"obs": torch.randn(2, 3, 4), "n": {"x": torch.ones(2, 3)}}, [2, 3])
    td.refine_names("env", "time")
    out = roundtrip(td)
    assert out.names == ["env", "time"]
    assert out["n"].names == ["env", "time"]
    assert_identical(td, out)


def test_partially_named_and_unnamed():
    td = TensorDict({"obs": torch.randn(2, 3)}, [2, 3], names=["env", None])
    assert_identical(td, roundtrip(td))
    assert _names(roundtrip(TensorDict({"obs": torch.randn(2)}, [2]))) is None


def test_zero_dim_and_zero_size():
    scalar = TensorDict({"r": torch.tensor(1.5), "n": {"i": torch.tensor(7)}}, [])
    assert_identical(scalar, roundtrip(scalar))
    empty = TensorDict({"obs": torch.zeros(0, 4), "act": torch.zeros(0, dtype=torch.long)}, [0])
    assert_identical(empty, roundtrip(empty))
    assert_identical(empty, roundtrip(empty, compress=True))


def test_batch_size_2_3():
    td = TensorDict(
        {"obs": torch.randn(2, 3, 8), "done": torch.zeros(2, 3, 1, dtype=torch.bool)}, [2, 3]
    )
    assert_identical(td, roundtrip(td))


def test_non_tensor_leaves():
    td = TensorDict({"x": torch.zeros(2, 3), "sub": {"y": torch.ones(2, 3)}}, [2, 3])
    td["task"] = NonTensorData("pick cube", batch_size=[2, 3])
    td["sub", "info"] = NonTensorData({"level": 3}, batch_size=[2, 3])
    td["per_env"] = tensordict.NonTensorStack.from_list([["a", "b", "c"], ["d", "e", "f"]])
    out = roundtrip(td)
    assert_identical(td, out)
    assert out["task"] == "pick cube"
    assert out["sub", "info"] == {"level": 3}
    assert out.get("per_env").tolist() == [["a", "b", "c"], ["d", "e", "f"]]


def test_lazy_stacked_input_is_densified():
    parts = [TensorDict({"obs": torch.randn(3, 2), "n": {"r": torch.ones(3)}}, [3]) for _ in "ab"]
    lazy = tensordict.LazyStackedTensorDict.lazy_stack(parts, dim=0)
    out = roundtrip(lazy)
    assert_identical(lazy.contiguous(), out)
    nested = TensorDict({"lazy": lazy, "z": torch.zeros(2)}, [2])
    assert_identical(nested.contiguous(), roundtrip(nested))


def test_non_contiguous_and_grad_leaves():
    base = torch.randn(6, 4, requires_grad=True)
    td = TensorDict({"t": base.detach().t(), "g": base * 2, "s": base.detach()[:, ::2]}, [])
    assert not td["t"].is_contiguous()
    out = roundtrip(td)
    assert_identical(td, out)
    assert all(value.is_contiguous() for value in out.values())
    assert not out["g"].requires_grad


def test_module_weights_round_trip_without_copy():
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    weights = TensorDict.from_module(module)
    payload = encode_tensordict(weights)
    assert payload.buffers[0].ctypes.data == weights.get(payload.header["entries"][1][1]).data_ptr()
    out = decode_tensordict(payload)
    assert_identical(weights, out)
    out.to_module(module)  # the decoded weights load back into a module


def test_device_is_recorded():
    with_device = TensorDict({"x": torch.ones(2)}, [2], device="cpu")
    out = roundtrip(with_device)
    assert out.device == torch.device("cpu")
    assert roundtrip(TensorDict({"x": torch.ones(2)}, [2])).device is None


def test_torchrl_rollout(rollout):
    assert ("next", "reward") in rollout.keys(True)
    assert_identical(rollout, roundtrip(rollout))
    assert_identical(rollout, roundtrip(rollout, compress=True))
    assert_identical(rollout, roundtrip(rollout, compress=["observation"]))


def test_codec_is_reusable_across_batches(rollout):
    codec = TensorDictCodec(compress=["observation"])
    for _ in range(3):
        assert_identical(rollout, codec.decode(codec.encode(rollout)))


def test_functional_forms():
    td = TensorDict({"a": torch.arange(6).reshape(3, 2)}, [3])
    assert_identical(td, decode_tensordict(encode_tensordict(td)))
    assert_identical(td, decode_tensordict(encode_tensordict(td, compress=True)))


# ---- compression ---------------------------------------------------------------------------


def _pixel_td() -> TensorDict:
    pixels = torch.zeros(16, 3, 32, 32, dtype=torch.uint8)
    pixels[:, :, 8:16] = 200  # compressible
    return TensorDict(
        {
            "pixels": pixels,
            "obs": torch.randn(16, 4),
            "next": {"pixels": pixels.clone(), "reward": torch.randn(16, 1)},
        },
        [16],
    )


def _codecs(payload: Payload) -> dict[tuple[str, ...], str]:
    return {e[1]: e[4] for e in payload.header["entries"] if e[0] == "tensor"}


def test_compress_selected_keys_at_any_depth():
    td = _pixel_td()
    payload = TensorDictCodec(compress=["pixels"]).encode(td)
    assert _codecs(payload) == {
        ("pixels",): "lz4",
        ("obs",): "raw",
        ("next", "pixels"): "lz4",
        ("next", "reward"): "raw",
    }
    raw = TensorDictCodec().encode(td)
    assert payload.nbytes < raw.nbytes
    for compressed, plain in zip(payload.buffers, raw.buffers, strict=True):
        if compressed.dtype == np.uint8 and compressed.ndim == 1:
            assert compressed.nbytes < plain.nbytes
    # untouched leaves are still the very memory of the input
    assert np.shares_memory(payload.buffers[1], td["obs"].numpy())
    assert_identical(td, TensorDictCodec().decode(payload))


def test_compress_exact_path_and_subtensordict():
    td = _pixel_td()
    exact = TensorDictCodec(compress=[("next", "pixels")]).encode(td)
    assert [k for k, c in _codecs(exact).items() if c == "lz4"] == [("next", "pixels")]
    whole = TensorDictCodec(compress=["next"]).encode(td)
    assert _codecs(whole)[("next", "pixels")] == "lz4"
    assert _codecs(whole)[("pixels",)] == "raw"


def test_compress_true_skips_incompressible_and_small_leaves():
    td = _pixel_td()
    payload = TensorDictCodec(compress=True).encode(td)
    codecs = _codecs(payload)
    assert codecs[("pixels",)] == "lz4"
    assert codecs[("obs",)] == "raw"  # random floats: lz4 does not shrink them
    codec = TensorDictCodec(compress=True, min_compress_bytes=10**6)
    assert repr(codec) == (
        "TensorDictCodec(compress=True, min_compress_bytes=1000000, fold_next_bytes=None)"
    )
    small = codec.encode(td)
    assert set(_codecs(small).values()) == {"raw"}
    assert_identical(td, TensorDictCodec().decode(payload))


def test_compression_helpers():
    raw = np.zeros((64, 64), dtype=np.float32)
    packed = compress_bytes(raw)
    assert packed.dtype == np.uint8 and packed.ndim == 1 and packed.nbytes < raw.nbytes
    out = decompress_bytes(packed, raw.nbytes)
    assert out.flags.writeable and (out.view(np.float32).reshape(64, 64) == raw).all()
    with pytest.raises(ValueError, match="expected"):
        decompress_bytes(packed, raw.nbytes + 1)
    with pytest.raises(ValueError, match="not a valid lz4 frame"):
        decompress_bytes(np.arange(10, dtype=np.uint8), 10)
    with pytest.raises(ValueError, match="C-contiguous"):
        compress_bytes(raw[:, ::2])


# ---- zero copy and pickle ------------------------------------------------------------------


def test_encode_does_not_copy_contiguous_cpu_leaves():
    td = TensorDict({"obs": torch.randn(100, 4), "h": torch.ones(100, dtype=torch.bfloat16)}, [100])
    payload = encode_tensordict(td)
    assert payload.buffers[0].ctypes.data == td["obs"].data_ptr()
    assert payload.buffers[1].ctypes.data == td["h"].data_ptr()
    assert payload.nbytes == 100 * 4 * 4 + 100 * 2


def test_decode_does_not_copy_buffers():
    td = TensorDict({"obs": torch.randn(100, 4), "h": torch.ones(100, dtype=torch.bfloat16)}, [100])
    payload = encode_tensordict(td)
    payload = Payload(payload.header, tuple(b.copy() for b in payload.buffers))
    out = decode_tensordict(payload)
    assert out["obs"].data_ptr() == payload.buffers[0].ctypes.data
    assert out["h"].data_ptr() == payload.buffers[1].ctypes.data
    payload.buffers[0][0, 0] = 123.0
    assert out["obs"][0, 0] == 123.0


def test_read_only_buffers_decode_without_copy_or_warning():
    td = TensorDict({"obs": torch.randn(10, 4), "nested": {"a": torch.arange(10)}}, [10])
    _, received = pickle5(encode_tensordict(td), read_only=True)
    assert not received.buffers[0].flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = decode_tensordict(received)
    assert out["obs"].data_ptr() == received.buffers[0].ctypes.data
    assert_identical(td, out)


def test_pickle_protocol5_ships_pixels_out_of_band():
    frame = torch.arange(84 * 84 * 4, dtype=torch.int32).to(torch.uint8).reshape(84, 84, 4)
    pixels = frame.expand(1000, 84, 84, 4).contiguous()
    td = TensorDict({"pixels": pixels, "reward": torch.randn(1000, 1)}, [1000])
    payload = encode_tensordict(td)
    data, received = pickle5(payload)
    assert len(data) < 4096, f"in-band pickle is {len(data)} bytes"
    assert payload.nbytes >= pixels.numel()
    out = decode_tensordict(received)
    assert out["pixels"].data_ptr() == received.buffers[0].ctypes.data
    assert_identical(td, out)


def test_plain_pickle_round_trip():
    td = _pixel_td()
    payload = TensorDictCodec(compress=["pixels"]).encode(td)
    assert_identical(td, decode_tensordict(pickle.loads(pickle.dumps(payload))))
    assert "leaves=4" in repr(payload)


# ---- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [1, None, "pixels", {"pixels": True}, [1], ["a", 2.0]])
def test_compress_of_wrong_type(bad):
    with pytest.raises(TypeError, match="compress must be a bool or a sequence of keys") as info:
        TensorDictCodec(compress=bad)
    assert repr(bad) in str(info.value)


def test_bad_constructor_values():
    with pytest.raises(ValueError, match="non-empty"):
        TensorDictCodec(compress=[()])
    with pytest.raises(ValueError, match="min_compress_bytes must be >= 0"):
        TensorDictCodec(min_compress_bytes=-1)
    with pytest.raises(TypeError, match="min_compress_bytes must be an int"):
        TensorDictCodec(min_compress_bytes=1.5)


def test_encode_rejects_non_tensordict():
    with pytest.raises(TypeError, match="td must be a tensordict"):
        encode_tensordict({"a": torch.zeros(2)})
    sparse = TensorDict({"s": torch.eye(3).to_sparse()}, [3])
    with pytest.raises(TypeError, match=r"key \('s',\)"):
        encode_tensordict(sparse)


def _payload() -> Payload:
    return encode_tensordict(TensorDict({"a": torch.zeros(4, 2), "b": torch.ones(4)}, [4]))


def test_decode_buffer_count_mismatch():
    payload = _payload()
    with pytest.raises(ValueError, match="describes 2 tensor leaves but the payload has 1"):
        decode_tensordict(Payload(payload.header, payload.buffers[:1]))


def test_decode_wrong_buffer_size_or_dtype():
    payload = _payload()
    short = (payload.buffers[0][:3], payload.buffers[1])
    with pytest.raises(ValueError, match=r"leaf \('a',\).*shape \(3, 2\).*shape \(4, 2\)"):
        decode_tensordict(Payload(payload.header, short))
    retyped = (payload.buffers[0].astype(np.float64), payload.buffers[1])
    with pytest.raises(ValueError, match="dtype float64"):
        decode_tensordict(Payload(payload.header, retyped))


def test_decode_corrupt_compressed_buffer():
    td = TensorDict({"a": torch.zeros(1000)}, [1000])
    payload = encode_tensordict(td, compress=True)
    truncated = (payload.buffers[0][:-8],)
    with pytest.raises(ValueError, match="lz4"):
        decode_tensordict(Payload(payload.header, truncated))


def test_decode_malformed_header():
    payload = _payload()
    with pytest.raises(ValueError, match="format"):
        decode_tensordict(Payload({"format": "other"}, payload.buffers))
    missing = {k: v for k, v in payload.header.items() if k != "entries"}
    with pytest.raises(ValueError, match="malformed payload"):
        decode_tensordict(Payload(missing, payload.buffers))
    bad_batch = {**payload.header, "batch_size": (5,)}
    with pytest.raises(ValueError, match="does not start with"):
        decode_tensordict(Payload(bad_batch, payload.buffers))
    with pytest.raises(TypeError, match="payload must be a Payload"):
        decode_tensordict(payload.header)
