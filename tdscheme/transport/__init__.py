"""Transport of TensorDicts between processes: flat numpy buffers plus a small header.

:class:`TensorDictCodec` turns a TensorDict into a :class:`Payload` whose numpy buffers Ray
(pickle protocol 5) moves out of band, without copies, and rebuilds it on the other side
without copying the buffers either; optional lz4 compression is for slow links.
"""

from __future__ import annotations

from tdscheme.transport.codec import (
    Payload,
    TensorDictCodec,
    decode_tensordict,
    encode_tensordict,
)

__all__ = ["Payload", "TensorDictCodec", "decode_tensordict", "encode_tensordict"]
