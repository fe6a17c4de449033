"""A batch laid out in one storage crosses as one buffer and comes back identical."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdscheme.transport import TensorDictCodec
from tdscheme.transport.arena import ALIGN, one_storage_, storage_of

from .test_codec import ALL_DTYPES, assert_identical, pickle5


def _batch(dtypes=ALL_DTYPES) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    leaves = {
        f"x{i}": torch.randint(0, 100, (64, 3), generator=g).to(dtype)
        for i, dtype in enumerate(dtypes)
    }
    return TensorDict(
        {
            **leaves,
            "next": {"observation": torch.randn(64, 5, generator=g), "empty": torch.zeros(64, 0)},
            "collector": {"mask": torch.rand(64, generator=g) < 0.5},
        },
        batch_size=[64],
    )


def _leaves(td):
    return [v for v in td.values(True, True) if isinstance(v, torch.Tensor)]


def test_one_storage_lays_every_leaf_out_in_one_aligned_storage_values_unchanged():
    td = _batch()
    before = td.clone()
    assert storage_of(_leaves(td)) is None
    assert one_storage_(td)
    assert_identical(before, td)
    storage = {v.untyped_storage().data_ptr() for v in _leaves(td)}
    assert len(storage) == 1
    offsets = [v.storage_offset() * v.element_size() for v in _leaves(td)]
    assert all(offset % ALIGN == 0 for offset in offsets)


@pytest.mark.parametrize("read_only", [True, False])
def test_a_batch_in_one_storage_crosses_as_one_buffer_and_comes_back_identical(read_only):
    td = _batch()
    one_storage_(td)
    payload = TensorDictCodec().encode(td)
    assert payload.header["arena"] is True
    assert len(payload.buffers) == 2  # the storage, and the empty leaf's own empty buffer
    assert payload.buffers[0].ctypes.data == td["x0"].untyped_storage().data_ptr()  # no copy
    _, received = pickle5(payload, read_only=read_only)
    assert_identical(td, TensorDictCodec().decode(received))


def test_slices_of_a_larger_tensor_are_sent_as_themselves_not_with_the_rest():
    base = torch.arange(1000, dtype=torch.float32)
    td = TensorDict({"a": base[:10], "b": base[10:20]}, batch_size=[10])
    payload = TensorDictCodec().encode(td)
    assert "arena" not in payload.header and len(payload.buffers) == 2
    assert_identical(td, TensorDictCodec().decode(payload))


def test_a_codec_keeping_its_batch_in_one_storage_lays_it_out_after_the_first_encode():
    td = _batch([torch.float32, torch.int64])
    codec = TensorDictCodec(keep_in_one_storage=True)
    first = codec.encode(td)
    assert "arena" not in first.header  # sent as it was, then laid out for the next one
    assert_identical(td, codec.decode(first))
    td["x0"].add_(1)  # refilled in place, as a worker's next batch
    second = codec.encode(td)
    assert second.header["arena"] is True
    assert_identical(td, codec.decode(second))


def test_a_codec_stops_laying_out_a_batch_that_never_stays_in_one_storage():
    td = _batch([torch.float32, torch.int64])
    codec = TensorDictCodec(keep_in_one_storage=True)
    for _ in range(2):
        codec.encode(td)
        td.set("x0", td["x0"].clone())  # a leaf replaced each batch: never one storage
    kept = td["x1"]
    assert "arena" not in codec.encode(td).header
    assert td["x1"] is kept  # two layouts in a row gave nothing: no third


def test_a_malformed_slice_is_an_error_naming_its_key():
    td = _batch([torch.float32])
    one_storage_(td)
    payload = TensorDictCodec().encode(td)
    entries = [list(e) for e in payload.header["entries"]]
    for entry in entries:
        if entry[0] == "slice" and entry[1] == ("x0",):
            entry[4] = payload.buffers[0].nbytes  # past the end
    header = {**payload.header, "entries": [tuple(e) for e in entries]}
    bad = type(payload)(header, payload.buffers)
    with pytest.raises(ValueError, match=r"\('x0',\).*runs past"):
        TensorDictCodec().decode(bad)
    no_arena = type(payload)({**payload.header, "arena": False}, payload.buffers[1:])
    with pytest.raises(ValueError, match="arena"):
        TensorDictCodec().decode(no_arena)
