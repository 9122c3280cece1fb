"""The format conformance suite for OME-Zarr stores: vitrio's writer (zstd, blosc, uncompressed, small
chunks), and stores the `ome-zarr` package writes (NGFF 0.4 on Zarr v2, 0.5 on Zarr v3), read chunk by
chunk; and a sharded Zarr v3 store, whose shards decode their inner chunks."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from ome_zarr.writer import write_image

import vitrio as vio
from vitrio.formats.zarr import OmeZarrFormat
from vitrio.testing.conformance import FormatConformance

from ..core.helpers import NUMPY_TYPES

pytestmark = [
    pytest.mark.filterwarnings("ignore:Dimension . is too small:UserWarning"),
    pytest.mark.filterwarnings("ignore:Call to deprecated class Scaler:DeprecationWarning"),
]

STACK_AXES = {1: "c", 2: "tc"}


def chunk_files(store) -> list[str]:
    """The chunk files of level 0 of a store: every file under its array but the metadata."""
    level = os.path.join(store, "0") if os.path.isdir(os.path.join(store, "0")) else os.path.join(store, "s0")
    return [
        os.path.join(folder, name)
        for folder, _, names in os.walk(level)
        for name in names
        if not name.startswith(".") and name != "zarr.json"
    ]


class TestOmeZarr(FormatConformance):
    """Stores vitrio writes: NGFF 0.4 on Zarr v2, zstd, a pyramid of 3 levels."""

    extension = ".zarr"
    dtypes = (*NUMPY_TYPES, "bool")

    def test_errors_name_the_file(self, tmp_path, rng):
        """A store is a directory: its truncated chunks, not the store, are cut short here."""
        path, _ = self._stack(tmp_path, rng, 3, 32, 32)
        with pytest.raises(IndexError, match=path.name):
            self._read(vio.ImageLocation(path, 3))
        for name in chunk_files(path):
            with open(name, "r+b") as file:
                file.truncate(os.path.getsize(name) // 2)
        with pytest.raises((ValueError, OSError), match=path.name) as raised:
            self._read(vio.ImageLocation(path, 2))
        assert "chunk" in str(raised.value)
        empty = tmp_path / ("empty" + self.extension)
        empty.write_bytes(b"")
        with pytest.raises(ValueError, match=empty.name):
            self._read(empty)


class TestOmeZarrBloscSmallChunks(TestOmeZarr):
    """Blosc, and chunks of 4 voxels: every read spans many chunks, edge chunks included."""

    def make(self, path, values, core_rank):
        configured = OmeZarrFormat.configured(codec="blosc", chunks=4, levels=2)
        vio.write(values, path, vio.ImageDescriptor(values.shape, core_rank, values.dtype), [configured])


class TestOmeZarrUncompressed(TestOmeZarr):
    dtypes = ("float32", "uint16", "complex64")

    def make(self, path, values, core_rank):
        configured = OmeZarrFormat.configured(codec=None, chunks=3, levels=1)
        vio.write(values, path, vio.ImageDescriptor(values.shape, core_rank, values.dtype), [configured])


class TestOmeZarrByOmeZarr(TestOmeZarr):
    """Stores the `ome-zarr` package writes: NGFF 0.4 on Zarr v2, its default pyramid and chunks."""

    dtypes = ("float32", "uint8", "int16", "uint16", "float64")
    zarr_format = 2

    def make(self, path, values, core_rank):
        stack = values.ndim - core_rank
        if stack > 2 or (stack and core_rank == 2 and values.ndim > 3) or (stack > 1 and core_rank == 3):
            raise ValueError(f"{path}: not an image this test writes with ome-zarr")
        axes = STACK_AXES.get(stack, "") + ("zyx" if core_rank == 3 else "yx")
        group = zarr.open_group(str(path), mode="w", zarr_format=self.zarr_format)
        chunks = (1,) * stack + (4,) * core_rank
        write_image(values, group, axes=axes, storage_options={"chunks": chunks})


class TestOmeZarrV3ByOmeZarr(TestOmeZarrByOmeZarr):
    """NGFF 0.5 on Zarr v3, as the `ome-zarr` package writes it."""

    zarr_format = 3


class TestShardedZarrV3(TestOmeZarr):
    """A Zarr v3 array in shards of 2 x 2 chunks, written by zarr with NGFF 0.5 metadata by hand."""

    dtypes = ("float32", "int16")

    def make(self, path, values, core_rank):
        stack = values.ndim - core_rank
        if stack > 2:
            raise ValueError(f"{path}: OME-Zarr stacks along 2 axes at most")
        group = zarr.open_group(str(path), mode="w", zarr_format=3)
        chunks = (1,) * stack + (4,) * core_rank
        shards = (1,) * stack + (8,) * core_rank
        group.create_array("0", data=values, chunks=chunks, shards=shards)
        axes = [{"name": n, "type": "channel"} for n in STACK_AXES.get(stack, "")] + [
            {"name": n, "type": "space", "unit": "nanometer"} for n in "zyx"[3 - core_rank :]
        ]
        transform = [{"type": "scale", "scale": [1.0] * values.ndim}]
        multiscale = {"axes": axes, "datasets": [{"path": "0", "coordinateTransformations": transform}]}
        group.attrs["ome"] = {"version": "0.5", "multiscales": [multiscale]}

    def test_shards_decode_their_inner_chunks(self, tmp_path, rng):
        path, values = self._file(tmp_path, rng, (6, 13, 17), 3)
        reader = vio.formats.open_reader(path)
        assert reader.level.chunks == (8, 8, 8) and reader.level.codec.pieces == 8  # 2 x 2 x 2 inner chunks
        assert reader.voxel_size == (10.0, 10.0, 10.0)  # nanometres in ångströms
        out = np.zeros((3, 9, 5), values.dtype)
        reader.read_region(0, (slice(2, 5), slice(3, 12), slice(11, 16)), out)
        np.testing.assert_array_equal(out, values[2:5, 3:12, 11:16])
