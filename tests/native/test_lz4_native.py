"""The C extension's LZ4 block decoder (lz4_decode), which reads the compressed columns of cryoSPARC's
`.cs` streams: blocks of every kind of data decode to it, and no block, however cut or drawn, makes it
read or write past its buffers (run under the sanitizers by make test-native-sanitized)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.data.test_cs import _lz4_block
from vitrio import _native

_DATA = st.one_of(
    st.binary(max_size=600),
    st.lists(st.sampled_from([b"\0" * 40, b"J12/particles.mrcs", b"ab", b"\xff"]), max_size=60).map(b"".join),
)


@settings(max_examples=200, deadline=None)
@given(data=_DATA)
def test_every_block_decodes_to_its_data(data: bytes):
    block = _lz4_block(data)
    out = bytearray(len(data))
    _native.lz4_decode(block, out)
    assert bytes(out) == data


@settings(max_examples=300, deadline=None)
@given(block=st.binary(max_size=64), size=st.integers(0, 300))
def test_a_drawn_block_decodes_or_is_refused(block: bytes, size: int):
    out = bytearray(size)
    try:
        _native.lz4_decode(block, out)
    except ValueError as error:
        assert "not an LZ4 block" in str(error)


@given(data=_DATA.filter(len), cut=st.integers(1, 8))
def test_a_block_cut_short_is_refused(data: bytes, cut: int):
    block = _lz4_block(data)
    with pytest.raises(ValueError):
        _native.lz4_decode(block[: max(len(block) - cut, 0)], bytearray(len(data)))
