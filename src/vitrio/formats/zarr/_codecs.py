"""Decoding one chunk of a Zarr array into an array of its chunk's shape, its size bounded before decoding.

Chunks compressed with zstd, blosc, lz4, gzip or zlib (or not at all), in
Zarr v2 or v3 metadata, decode here, on the calling thread, into a buffer
of exactly the chunk's size: a chunk that says it decodes to another size
is refused before anything is allocated for it. Arrays with other codecs
(filters, sharding, transposition) are read through zarr's own pipeline,
chunk by chunk, among the codecs `SAFE_CODECS` lists; others (pickle,
variable-length objects) are refused.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["SAFE_CODECS", "codec_names", "chunk_decoder"]

SAFE_CODECS = frozenset(
    {"bytes", "transpose", "sharding_indexed", "crc32c", "zstd", "blosc", "lz4", "gzip", "zlib"}
    | {"shuffle", "delta", "crc32", "adler32", "fletcher32"}
)
"""The codecs an array may use: compressors, checksums and lossless filters of fixed-size values."""

_ZSTD_MAGIC = 0xFD2FB528
_DICT_ID_BYTES = (0, 1, 2, 4)


def codec_names(metadata: Any) -> list[str]:
    """The names of the codecs of an array's metadata (v2 filters and compressor, or v3 codecs)."""
    if getattr(metadata, "zarr_format", None) == 2:
        codecs = [*(metadata.filters or ()), *([metadata.compressor] if metadata.compressor else [])]
        return [str(codec.codec_id) for codec in codecs]
    names = []
    for codec in metadata.codecs:
        name = str(codec.to_dict()["name"])
        names.append(name.removeprefix("numcodecs."))
        inner = getattr(codec, "codecs", None)
        if inner:  # sharding: the codecs of the inner chunks, and of the index
            names += [str(c.to_dict()["name"]).removeprefix("numcodecs.") for c in inner]
            names += [str(c.to_dict()["name"]).removeprefix("numcodecs.") for c in codec.index_codecs]
    return names


def _zstd_size(buf: bytes) -> int | None:
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


def _declared_size(codec_id: str, buf: bytes) -> int | None:
    """The decoded size a compressed chunk declares in its header, None where it declares none."""
    if codec_id == "zstd":
        return _zstd_size(buf)
    if codec_id == "blosc":  # a 16-byte header: version, flags, type size, sizes decoded and stored
        if len(buf) < 16 or struct.unpack_from("<I", buf, 12)[0] != len(buf):
            raise ValueError(f"a blosc chunk of {len(buf)} bytes whose header says otherwise: cut short")
        return int(struct.unpack_from("<I", buf, 4)[0])
    if codec_id == "lz4":
        if len(buf) < 4:
            raise ValueError("an lz4 chunk cut short")
        return int(struct.unpack_from("<I", buf)[0])
    return None


def _inflate(buf: bytes, wbits: int, nbytes: int) -> bytes:
    """gzip or zlib data decompressed, refusing more than `nbytes` bytes of it."""
    decompressor = zlib.decompressobj(wbits)
    data = decompressor.decompress(buf, nbytes + 1)
    if len(data) > nbytes or not decompressor.eof:
        raise ValueError(f"decodes to more than {nbytes} bytes, or is cut short")
    return data


def chunk_decoder(metadata: Any, chunk_shape: tuple[int, ...]) -> Callable[[bytes], np.ndarray] | None:
    """A function decoding a stored chunk into an array of `chunk_shape`, or None for zarr's pipeline.

    The function raises `ValueError` for a chunk that is cut short, corrupt, or decodes to another size.
    """
    import numcodecs

    if getattr(metadata, "zarr_format", None) == 2:
        if metadata.filters:
            return None
        dtype = np.dtype(metadata.dtype.to_native_dtype())
        compressor = metadata.compressor
        order = metadata.order
    else:
        codecs = list(metadata.codecs)
        first = codecs[0].to_dict()
        if first["name"] != "bytes" or len(codecs) > 2:
            return None
        endian = (first.get("configuration") or {}).get("endian", "little")
        dtype = np.dtype(metadata.dtype.to_native_dtype()).newbyteorder("<" if endian == "little" else ">")
        compressor = None
        if len(codecs) == 2:
            name = codecs[1].to_dict()["name"].removeprefix("numcodecs.")
            if name not in ("zstd", "blosc", "gzip"):
                return None
            compressor = numcodecs.get_codec({"id": name})
        order = "C"
    codec_id = None if compressor is None else str(compressor.codec_id)
    if codec_id not in (None, "zstd", "blosc", "lz4", "gzip", "zlib"):
        return None
    nbytes = int(np.prod(chunk_shape)) * dtype.itemsize

    def decode(buf: bytes) -> np.ndarray:
        if codec_id is None:
            raw = buf
        elif codec_id in ("gzip", "zlib"):
            raw = _inflate(buf, 31 if codec_id == "gzip" else 15, nbytes)
        else:
            declared = _declared_size(codec_id, buf)
            if declared is not None and declared != nbytes:
                raise ValueError(f"declares {declared} bytes decoded, not the chunk's {nbytes}")
            raw = compressor.decode(buf, out=np.empty(nbytes, np.uint8))
        if len(memoryview(raw).cast("B")) != nbytes:
            raise ValueError(f"decodes to {len(memoryview(raw).cast('B'))} bytes, not the chunk's {nbytes}")
        return np.frombuffer(raw, dtype=dtype).reshape(chunk_shape, order=order)

    return decode
