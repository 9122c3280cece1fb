"""A format of `complex_float16` values, which numpy has no type for: for the paths a file of them takes.

A `.c32` file is three little-endian int32 extents (a stack of 2-D images,
slowest first), then the values as float16 pairs (real, imaginary).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

import vitrio as vio
from vitrio.formats import ByteSource, Format, ImageReader, _registry

_HEADER = 12


def write_half_complex(path: Path, values: np.ndarray) -> None:
    """Write the complex `values`, a stack of 2-D images, as a `.c32` file."""
    pairs = np.stack([values.real, values.imag], axis=-1).astype("<f2")
    path.write_bytes(np.asarray(values.shape, "<i4").tobytes() + pairs.tobytes())


class _HalfComplexReader(ImageReader):
    def __init__(self, key: str, source: ByteSource, head: bytes):
        extents = np.frombuffer(head[:_HEADER], "<i4").tolist()
        super().__init__(key, vio.ImageDescriptor(extents, 2, vio.NumericalType.complex_float16))
        with source:
            values = source.pread(source.size - _HEADER, _HEADER)
        self._values = np.frombuffer(values, "<f2").reshape(*extents, 2)

    def read_run(self, start: int, outs: Sequence[np.ndarray]) -> None:
        self.check_run(start, len(outs))
        for pairs, out in zip(self._values[start : start + len(outs)], outs):
            out[...] = pairs[..., 0] + 1j * pairs[..., 1].astype(np.complex64)

    def close(self) -> None:
        pass


class HalfComplexFormat(Format):
    name = "c32"
    read_extensions = (".c32",)

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> ImageReader:
        return _HalfComplexReader(key, source, head)


@pytest.fixture
def half_complex(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Format]]:
    """`HalfComplexFormat` registered while the test runs."""
    monkeypatch.setattr(_registry, "_REGISTRY", list(_registry._REGISTRY))
    vio.register_format(HalfComplexFormat)
    yield HalfComplexFormat
