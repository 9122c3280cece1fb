"""Decoding a stored chunk of a Zarr array into an array of the chunk's shape, every stage of it bounded.

A chunk goes through a chain of codecs: Zarr v2's filters and compressor,
Zarr v3's array codecs (`transpose`), its array-to-bytes codec (`bytes`, or
`sharding_indexed`, whose inner chunks have chains of their own) and its
bytes codecs. The chain is undone here stage by stage, on the calling
thread, and the size each stage decodes to is known from the metadata
before the chunk is read: a compressor's output must be exactly that size,
checked against what its header declares before anything is allocated
(blosc, lz4, zstd), or decoded into a buffer of that size (zstd declaring
nothing) or streamed with that cap (gzip, zlib). So no chunk decodes to
more than its array says. A compressor whose decoded size is not known
(after another compressor, or after sharding), and codecs other than
those of `CODECS`, are refused when the array is opened.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ._metadata import ArrayMetadata, Codec, brief

__all__ = ["CODECS", "ChunkCodec", "codec_names", "chunk_codec"]

CODECS = frozenset(
    {"bytes", "transpose", "sharding_indexed", "crc32c", "zstd", "blosc", "lz4", "gzip", "zlib"}
    | {"shuffle", "delta", "crc32", "adler32", "fletcher32"}
)
"""The codecs an array may use: compressors, checksums and lossless filters of fixed-size values."""

_COMPRESSORS = frozenset({"zstd", "blosc", "lz4", "gzip", "zlib"})
_CHECKSUMS = frozenset({"crc32", "adler32", "fletcher32", "crc32c"})
_ZSTD_MAGIC = 0xFD2FB528
_DICT_ID_BYTES = (0, 1, 2, 4)
_MISSING = (1 << 64) - 1
"""The offset and length of an inner chunk a shard does not hold."""


class ChunkCodec(NamedTuple):
    """How the chunks of an array decode.

    Attributes:
        decode: What turns a stored chunk into an array of the chunk's shape; it raises `ValueError`
            (or `RuntimeError` from a checksum) for a chunk cut short, corrupt, or of another size.
        limit: The most bytes a stored chunk may take.
        stored: How many bytes a stored chunk takes, where that is known (no compression).
        pieces: How many chunks one chunk decodes: the inner chunks of a shard, else 1.
    """

    decode: Callable[[Any], np.ndarray]
    limit: int
    stored: int | None
    pieces: int


class _Stage(NamedTuple):
    """A codec of bytes: its name, its decoding `(buffer, decoded size) -> buffer`, the size `n` bytes
    encode to (None where not known), and the most they may encode to."""

    name: str
    decode: Callable[[Any, int | None], Any]
    encoded: Callable[[int | None], int | None]
    bound: Callable[[int], int]


def codec_names(metadata: ArrayMetadata) -> list[str]:
    """The names of the codecs of an array's metadata (v2 filters and compressor, or v3 codecs)."""
    return _names(metadata.codecs)


def _names(codecs: Sequence[Codec]) -> list[str]:
    names = []
    for codec in codecs:
        names.append(codec.name)
        if codec.name == "sharding_indexed":  # the codecs of the inner chunks, and of the index
            names += _names(codec.configuration["codecs"]) + _names(codec.configuration["index_codecs"])
    return names


def _length(buffer: Any) -> int:
    return memoryview(buffer).nbytes


def _zstd_size(buf: Any) -> int | None:
    """The content size a zstd frame declares, None if it declares none."""
    if len(buf) < 6 or struct.unpack_from("<I", buf)[0] != _ZSTD_MAGIC:
        raise ValueError("not a zstd frame")
    descriptor = buf[4]
    flag, single = descriptor >> 6, (descriptor >> 5) & 1
    at = 5 + (0 if single else 1) + _DICT_ID_BYTES[descriptor & 3]
    width = (1 if single else 0, 2, 4, 8)[flag]
    if width == 0:
        return None
    if len(buf) < at + width:
        raise ValueError("a zstd frame header cut short")
    size = int.from_bytes(buf[at : at + width], "little")
    return size + 256 if width == 2 else size


def _declared_size(codec_id: str, buf: Any) -> int | None:
    """The decoded size a compressed chunk declares in its header, None where it declares none."""
    if codec_id == "zstd":
        return _zstd_size(buf)
    if codec_id == "blosc":  # a 16-byte header: version, flags, type size, sizes decoded and stored
        if len(buf) < 16 or struct.unpack_from("<I", buf, 12)[0] != len(buf):
            raise ValueError(f"a blosc chunk of {len(buf)} bytes whose header says otherwise: cut short")
        return int(struct.unpack_from("<I", buf, 4)[0])
    if len(buf) < 4:  # lz4, as numcodecs frames it: the decoded size, then the data
        raise ValueError("an lz4 chunk cut short")
    return int(struct.unpack_from("<I", buf)[0])


def _inflate(buf: Any, wbits: int, nbytes: int) -> bytes:
    """gzip or zlib data decompressed, refusing more than `nbytes` bytes of it."""
    decompressor = zlib.decompressobj(wbits)
    try:
        data = decompressor.decompress(buf, nbytes + 1)
    except zlib.error as error:
        raise ValueError(f"corrupt {'gzip' if wbits > 15 else 'zlib'} data ({error})") from None
    if len(data) > nbytes or not decompressor.eof:
        raise ValueError(f"decodes to more than {nbytes} bytes, or is cut short")
    return data


def _numcodecs(name: str, configuration: dict[str, Any]) -> Any:
    """numcodecs' codec `name` configured as `configuration`.

    Raises:
        ValueError: If numcodecs is not installed, or the configuration is not one it takes.
    """
    try:
        import numcodecs
    except ModuleNotFoundError:
        raise ValueError(
            f"uses codec {brief(name)}, read with numcodecs, which is not installed: "
            "pip install 'vitrio[zarr-read]'"
        ) from None
    try:
        return numcodecs.get_codec({**configuration, "id": name})
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"a codec {brief(name)} configured as {brief(configuration)}: {error}") from None


def _decompressor(name: str) -> Callable[[Any, int], Any]:
    if name in ("gzip", "zlib"):
        wbits = 31 if name == "gzip" else 15
        return lambda buf, size: _inflate(buf, wbits, size)
    codec = _numcodecs(name, {})

    def decode(buf: Any, size: int) -> Any:
        buf = memoryview(buf).cast("B")
        declared = _declared_size(name, buf)
        if declared is not None and declared != size:
            raise ValueError(f"declares {declared} bytes decoded, not the {size} it holds")
        return codec.decode(buf, out=np.empty(size, np.uint8))  # zstd declaring nothing: at most `size`

    return decode


def _crc32c() -> Callable[[Any, int | None], Any]:
    """The check of a crc32c checksum (with google-crc32c), stripping it.

    Raises:
        ValueError: If google-crc32c is not installed.
    """
    try:
        import google_crc32c
    except ModuleNotFoundError:
        raise ValueError(
            "uses codec 'crc32c', read with google-crc32c, which is not installed: "
            "pip install 'vitrio[zarr-read]'"
        ) from None

    def check(buf: Any, size: int | None) -> Any:
        data = bytes(buf)
        if len(data) < 4 or google_crc32c.value(data[:-4]) != int.from_bytes(data[-4:], "little"):
            raise ValueError("its crc32c checksum does not match")
        return data[:-4]

    return check


def _stage(name: str, configuration: dict[str, Any]) -> _Stage:
    """The stage of the bytes codec `name` (numcodecs' id) configured as `configuration`."""
    if name in _COMPRESSORS:
        return _Stage(name, _decompressor(name), lambda n: None, lambda n: n + n // 16 + (1 << 16))
    if name in _CHECKSUMS:
        check = _crc32c() if name == "crc32c" else _numcodecs(name, configuration).decode
        return _Stage(name, check, lambda n: None if n is None else n + 4, lambda n: n + 4)
    if name == "shuffle":
        shuffle = _numcodecs(name, configuration)
        return _Stage(name, lambda buf, size: shuffle.decode(buf), lambda n: n, lambda n: n)
    if name == "delta":
        delta = _numcodecs(name, configuration)
        before, after = np.dtype(delta.dtype).itemsize, np.dtype(delta.astype).itemsize
        return _Stage(
            name,
            lambda buf, size: delta.decode(buf),
            lambda n: None if n is None else n // before * after,
            lambda n: n // before * after,
        )
    raise ValueError(f"uses codec {brief(name)}, not read (only {sorted(CODECS)})")


def _chain(
    stages: Sequence[_Stage], size: int | None, bound: int
) -> tuple[Callable[[Any], Any], int | None, int]:
    """Undoing `stages` (in the order they encode) over data of `size` bytes (None: not known) that
    take at most `bound`: the decoding, the size stored (None: not known) and the most stored."""
    sizes = [size]
    for stage in stages:
        if stage.name in _COMPRESSORS and sizes[-1] is None:
            raise ValueError(f"a {stage.name} compressor after another or after sharding, not read")
        sizes.append(stage.encoded(sizes[-1]))
        bound = stage.bound(bound)
    steps = list(zip(stages, sizes[:-1]))[::-1]
    stored = sizes[-1]

    def decode(buf: Any) -> Any:
        if stored is not None and _length(buf) != stored:
            raise ValueError(f"{_length(buf)} bytes stored, not the {stored} it takes")
        for stage, decoded in steps:
            buf = stage.decode(buf, decoded)
            if decoded is not None and _length(buf) != decoded:
                raise ValueError(f"{stage.name} decodes to {_length(buf)} bytes, not {decoded}")
        return buf

    return decode, stored, bound


def _v2(metadata: ArrayMetadata, shape: tuple[int, ...]) -> ChunkCodec:
    dtype = metadata.dtype
    nbytes = int(np.prod(shape)) * dtype.itemsize
    stages = [_stage(c.name, c.configuration) for c in metadata.codecs]
    decode_bytes, stored, limit = _chain(stages, nbytes, nbytes)
    order = metadata.order

    def decode(buf: Any) -> np.ndarray:
        return np.frombuffer(decode_bytes(buf), dtype=dtype).reshape(shape, order=order)

    return ChunkCodec(decode, limit, stored, 1)


def _v3(codecs: Sequence[Codec], shape: tuple[int, ...], dtype: np.dtype, fill: Any) -> ChunkCodec:
    """The decoding of chunks of `shape` through the Zarr v3 `codecs`."""
    orders = []
    while codecs and codecs[0].name == "transpose":
        order = tuple(codecs[0].configuration.get("order") or ())
        if sorted(order) != list(range(len(shape))) or not all(type(i) is int for i in order):
            raise ValueError(f"a transpose to {brief(order)}, not an order of the {len(shape)} axes")
        orders.append(order)
        shape = tuple(shape[i] for i in order)
        codecs = codecs[1:]
    if not codecs:
        raise ValueError("no codec turning an array into bytes")
    first, rest = codecs[0], codecs[1:]
    if first.name == "bytes":
        endian = first.configuration.get("endian") or "little"
        if endian not in ("little", "big"):
            raise ValueError(f"bytes of endian {brief(endian)}, not 'little' or 'big'")
        stored_type = dtype.newbyteorder("<" if endian == "little" else ">")
        nbytes = int(np.prod(shape)) * dtype.itemsize

        def to_array(buf: Any) -> np.ndarray:
            return np.frombuffer(buf, dtype=stored_type).reshape(shape)

        size, bound, pieces = nbytes, nbytes, 1
    elif first.name == "sharding_indexed":
        to_array, bound, pieces = _shards(first, shape, dtype, fill)
        size = None
    else:
        raise ValueError(f"uses codec {brief(first.name)}, not read (only {sorted(CODECS)})")
    stages = [_stage(c.name, c.configuration) for c in rest]
    decode_bytes, stored, limit = _chain(stages, size, bound)

    def decode(buf: Any) -> np.ndarray:
        array = to_array(decode_bytes(buf))
        for order in reversed(orders):
            array = array.transpose(np.argsort(order))
        return array

    return ChunkCodec(decode, limit, stored, pieces)


def _shards(
    codec: Codec, shape: tuple[int, ...], dtype: np.dtype, fill: Any
) -> tuple[Callable[[Any], np.ndarray], int, int]:
    """Decoding shards of `shape`: the function, the most bytes a shard takes, its inner chunks."""
    configuration = codec.configuration
    inner_shape = tuple(configuration.get("chunk_shape") or ())
    if (
        not all(type(n) is int for n in inner_shape)
        or len(inner_shape) != len(shape)
        or any(n < 1 or s % n for s, n in zip(shape, inner_shape))
    ):
        raise ValueError(f"shards of {shape} values do not split into inner chunks of {brief(inner_shape)}")
    grid = tuple(s // n for s, n in zip(shape, inner_shape))
    count = int(np.prod(grid))
    inner = _v3(configuration["codecs"], inner_shape, dtype, fill)
    index = _v3(configuration["index_codecs"], (*grid, 2), np.dtype(np.uint64), 0)
    index_bytes = index.stored
    if index_bytes is None:
        raise ValueError("a shard index whose size is not known (compressed), not read")
    location = configuration.get("index_location", "end")
    if location not in ("start", "end"):
        raise ValueError(f"a shard index at {brief(location)}, not 'start' or 'end'")
    at_end = location == "end"

    def decode(buf: Any) -> np.ndarray:
        buf = memoryview(buf).cast("B")
        if len(buf) < index_bytes:
            raise ValueError(f"a shard of {len(buf)} bytes, less than its index of {index_bytes}")
        table = index.decode(buf[len(buf) - index_bytes :] if at_end else buf[:index_bytes])
        table = np.asarray(table, np.uint64).reshape(count, 2)
        out = np.empty(shape, dtype)
        for (offset, length), coords in zip(table.tolist(), np.ndindex(*grid)):
            box = tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, inner_shape))
            if offset == length == _MISSING:
                out[box] = fill
            elif offset + length > len(buf) or length > inner.limit:
                raise ValueError(f"an inner chunk of {length} bytes at {offset}, past the shard's end")
            else:
                out[box] = inner.decode(buf[offset : offset + length])
        return out

    return decode, index_bytes + count * inner.limit, count * inner.pieces


def chunk_codec(metadata: ArrayMetadata, chunk_shape: tuple[int, ...], fill: Any) -> ChunkCodec:
    """How chunks (shards) of `chunk_shape` of an array of `metadata` decode.

    Raises:
        ValueError: If the array uses a codec not read, or one whose decoded size is not known.
    """
    if metadata.zarr_format == 2:
        return _v2(metadata, chunk_shape)
    return _v3(metadata.codecs, chunk_shape, metadata.dtype, fill)
