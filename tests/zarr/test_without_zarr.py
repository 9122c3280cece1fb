"""Reading OME-Zarr needs no zarr package (so it works beside zarr 2, as copick pins): stores zarr 3 writes,
Zarr v2 and v3, local and over HTTP, read in an interpreter where zarr cannot be imported give the values
they hold; metadata not understood is refused naming the store; writing
without zarr 3 is refused with an error naming the extra that installs it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, GzipCodec, TransposeCodec, ZstdCodec

import vitrio as vio

from .test_http import served  # noqa: F401 (a fixture: the tomogram's store over HTTP)

SHAPE = (20, 30, 28)


def _multiscale(path: str) -> dict:
    axes = [{"name": n, "type": "space", "unit": "angstrom"} for n in "zyx"]
    transform = [{"type": "scale", "scale": [2.0, 2.0, 2.0]}]
    return {"axes": axes, "datasets": [{"path": path, "coordinateTransformations": transform}]}


def v2_store(path: Path, values: np.ndarray) -> Path:
    """An NGFF 0.4 image of `values` (Zarr v2) in F order, chunks named with '/', blosc after a shuffle
    filter, big-endian values, NaN as the fill value."""
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    array = group.create_array(
        "0",
        shape=values.shape,
        chunks=(7, 16, 9),
        dtype=values.dtype.newbyteorder(">"),
        order="F",
        chunk_key_encoding={"name": "v2", "separator": "/"},
        filters=[numcodecs.Shuffle(elementsize=values.dtype.itemsize)],
        compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=0),
        fill_value=float("nan"),
    )
    array[:] = values
    group.attrs["multiscales"] = [{"version": "0.4", **_multiscale("0")}]
    return path


def v3_store(path: Path, values: np.ndarray) -> Path:
    """An NGFF 0.5 image of `values` (Zarr v3) with two levels: a sharded one (inner chunks zstd, a
    crc32c index) and one of big-endian transposed gzip chunks named as Zarr v2 names them."""
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    sharded = group.create_array(
        "0", shape=values.shape, chunks=(5, 8, 7), shards=(10, 16, 14), dtype=values.dtype,
        compressors=ZstdCodec(level=3), fill_value=-1,
    )  # fmt: skip
    sharded[:, :, :14] = values[:, :, :14]  # the other shards are not stored: fill values
    plain = group.create_array(
        "1", shape=values.shape, chunks=(6, 11, 13), dtype=values.dtype,
        chunk_key_encoding={"name": "v2", "separator": "."},
        filters=[TransposeCodec(order=(2, 0, 1))], serializer=BytesCodec(endian="big"),
        compressors=GzipCodec(level=4), fill_value=0,
    )  # fmt: skip
    plain[:] = values
    multiscale = _multiscale("0")
    multiscale["datasets"].append({**multiscale["datasets"][0], "path": "1"})
    group.attrs["ome"] = {"version": "0.5", "multiscales": [multiscale]}
    return path


_READ_WITHOUT_ZARR = """
import sys

import numpy as np

sys.modules["zarr"] = None  # `import zarr` raises ModuleNotFoundError
import vitrio as vio

keys, out = sys.argv[1:-1], sys.argv[-1]
np.savez(out, *[vio.read(key) for key in keys])
try:
    vio.write_single(np.zeros((4, 4, 4), np.float32), out + ".zarr")
except ModuleNotFoundError as error:
    print("refused:", error)
print("zarr imported:", sys.modules["zarr"] is not None)
"""


def _read_without_zarr(keys: list[str], tmp_path: Path) -> tuple[list[np.ndarray], str]:
    out = tmp_path / "values.npz"
    script = textwrap.dedent(_READ_WITHOUT_ZARR)
    result = subprocess.run(
        [sys.executable, "-c", script, *keys, str(out)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    with np.load(out) as saved:
        return [saved[f"arr_{i}"] for i in range(len(keys))], result.stdout


def test_stores_of_zarr_v2_and_v3_read_without_zarr_equal_what_they_hold(
    tmp_path: Path,
    tomogram,
    served,  # noqa: F811 (the fixture imported)
):
    values = np.random.default_rng(3).normal(size=SHAPE).astype(np.float32)
    integers = np.random.default_rng(4).integers(-1000, 1000, size=SHAPE, dtype=np.int16)
    old = v2_store(tmp_path / "old.zarr", values)
    new = v3_store(tmp_path / "new.zarr", integers)
    ours, tomogram_values = tomogram  # written by vitrio: Zarr v2, zstd; and served over HTTP
    keys = [str(old), str(new), f"{new}#1", str(ours), served]
    with_zarr = [vio.read(key) for key in keys]
    read, printed = _read_without_zarr(keys, tmp_path)
    unsharded = np.full(SHAPE, -1, np.int16)
    unsharded[:, :, :14] = integers[:, :, :14]
    expected_values = [values, unsharded, integers, tomogram_values, tomogram_values]
    for got, expected, same in zip(read, expected_values, with_zarr, strict=True):
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(got, same)
        assert got.dtype == expected.dtype
    assert "zarr imported: False" in printed
    assert "refused:" in printed and "vitrio[zarr]" in printed and "zarr 3" in printed, printed
    assert not (tmp_path / "values.npz.zarr").exists()


@pytest.mark.parametrize("zarr_module", [None, types.SimpleNamespace(__version__="2.18.7")])
def test_writing_without_zarr_3_is_refused_naming_the_extra(tmp_path: Path, monkeypatch, zarr_module):
    monkeypatch.setitem(sys.modules, "zarr", zarr_module)
    target = tmp_path / "out.zarr"
    with pytest.raises(
        ModuleNotFoundError, match=r"out\.zarr: writing OME-Zarr needs zarr 3.*vitrio\[zarr\]"
    ):
        vio.write_single(np.zeros((4, 4, 4), np.float32), target)
    assert not target.exists()


@pytest.mark.parametrize(
    "change, complaint",
    [
        ({"data_type": "float32", "chunk_grid": {"name": "rectilinear"}}, "chunk grid 'rectilinear'"),
        ({"chunk_key_encoding": {"name": "hashed"}}, "chunk key encoding 'hashed'"),
        ({"fill_value": "blue"}, "fill value 'blue'"),
        ({"shape": [20, -1, 28]}, r"shape \[20, -1, 28\]"),
        (
            {"codecs": [{"name": "transpose", "configuration": {"order": [0, 0, 1]}}, {"name": "bytes"}]},
            "transpose",
        ),
        ({"codecs": [{"name": "bytes", "configuration": {"endian": "middle"}}]}, "endian 'middle'"),
    ],
)
def test_metadata_not_understood_is_refused_naming_the_store(tmp_path: Path, change, complaint):
    store = tmp_path / "odd.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    group.create_array("0", shape=SHAPE, chunks=(10, 10, 10), dtype=np.float32)
    group.attrs["ome"] = {"version": "0.5", "multiscales": [_multiscale("0")]}
    metadata = store / "0" / "zarr.json"
    document = json.loads(metadata.read_text())
    metadata.write_text(json.dumps({**document, **change}))
    with pytest.raises(vio.FormatError, match=rf"odd\.zarr: .*{complaint}"):
        vio.read(str(store))


def test_an_integral_float_fill_value_of_integers_is_read(tmp_path: Path):
    store = tmp_path / "filled.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    group.create_array("0", shape=SHAPE, chunks=(10, 10, 10), dtype=np.int16, fill_value=5)
    group.attrs["ome"] = {"version": "0.5", "multiscales": [_multiscale("0")]}
    metadata = store / "0" / "zarr.json"
    metadata.write_text(json.dumps({**json.loads(metadata.read_text()), "fill_value": 3.0}))
    np.testing.assert_array_equal(vio.read(str(store)), np.full(SHAPE, 3, np.int16))


def test_a_compressed_store_without_numcodecs_is_refused_naming_the_extra(tmp_path: Path, monkeypatch):
    store = v2_store(tmp_path / "blosc.zarr", np.zeros(SHAPE, np.float32))
    monkeypatch.setitem(sys.modules, "numcodecs", None)
    with pytest.raises(vio.FormatError, match=r"blosc\.zarr: .*numcodecs.*vitrio\[zarr-read\]"):
        vio.read(str(store))


def test_what_metadata_declares_is_quoted_cut_short(tmp_path: Path):
    store = tmp_path / "long.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    group.create_array("0", shape=SHAPE, chunks=(10, 10, 10), dtype=np.float32)
    group.attrs["ome"] = {"version": "0.5", "multiscales": [_multiscale("0")]}
    metadata = store / "0" / "zarr.json"
    long = {"name": "bytes", "configuration": {"endian": "x" * 100_000}}
    metadata.write_text(json.dumps({**json.loads(metadata.read_text()), "codecs": [long]}))
    with pytest.raises(vio.FormatError, match=r"long\.zarr: .*endian 'xxx") as caught:
        vio.read(str(store))
    assert len(str(caught.value)) < 1000
