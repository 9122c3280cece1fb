"""The seeds of the fuzzer: small valid files of every format, a few KiB each, and their field offsets.

MRC files are made with the hand-made headers of `vitrio.testing.mrc`
and vitrio's writer, TIFF files with tifffile, EER movies with the encoder
of `vitrio.testing.eer`, DM files with the tag trees of `vitrio.testing.dm`
(and the smallest real DM samples, where the shared test data is there),
HDF5 files with h5py (read by the plug-in `cryovit.hdf5`): contiguous,
chunked, compressed with gzip and shuffle, a stack of volumes.
OME-Zarr stores are made by vitrio's writer and by zarr (filters, Zarr v3
transposition, checksums and shards); a seed is one file of a store, its
metadata or a chunk, mutated in a copy of the store (`fuzzing.place`).

A seed's fields are the offsets of what mutations most likely break: the
words of an MRC header, the count and value of every TIFF tag, and, in any
format, every 4 or 8 bytes that read as a small positive integer (counts,
sizes, offsets, dimensions).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import h5py
import numpy as np
import tifffile

import vitrio as vio
from vitrio.testing.dm import dm_file, image_entry, thumbnail
from vitrio.testing.eer import random_movie
from vitrio.testing.mrc import write_mrc_by_hand

from .. import DM_SAMPLES
from .fuzzing import Seed

FORMATS = ("mrc", "tiff", "eer", "dm", "zarr", "hdf5")
REGRESSIONS = Path(__file__).resolve().parent / "regressions"
_EXTENSIONS = {
    ".mrc": "mrc",
    ".mrcs": "mrc",
    ".tif": "tiff",
    ".tiff": "tiff",
    ".eer": "eer",
    ".dm3": "dm",
    ".dm4": "dm",
    ".h5": "hdf5",
    ".hdf5": "hdf5",
}
REAL_DM = ("2D-float32.dm4", "3D-uint16.dm4", "2D-int16.dm3")
"""The real DM files of `DM_SAMPLES` among the seeds."""


def _small_integers(content: bytes, limit: int = 4096) -> list[int]:
    """Offsets in the first `limit` bytes where 4 or 8 bytes read as an integer from 1 to the file's size."""
    found = set()
    size = len(content)
    for width in (4, 8):
        for order in ("little", "big"):
            for at in range(0, min(limit, size - width + 1)):
                if 0 < int.from_bytes(content[at : at + width], order) <= size:
                    found.add(at)
    return sorted(found)


def _tiff_fields(path: Path) -> list[int]:
    with tifffile.TiffFile(path) as tif:
        return sorted(
            {place for page in tif.pages for tag in page.tags for place in (tag.offset + 4, tag.valueoffset)}
        )


def _mrc_seeds(directory: Path) -> list[Path]:
    rng = np.random.default_rng(1)
    image = directory / "image.mrc"
    vio.write_single(rng.normal(size=(12, 16)).astype(np.float32), image)
    stack = directory / "stack.mrcs"
    write_mrc_by_hand(stack, rng.integers(-99, 99, (5, 8, 8)), 1)
    volume = directory / "volume-big-endian.map"
    write_mrc_by_hand(volume, rng.normal(size=(4, 6, 5)), 2, order=">", ispg=1, axes=(3, 1, 2))
    extended = directory / "extended.mrc"
    write_mrc_by_hand(extended, rng.integers(0, 999, (1, 10, 10)), 6, extended=bytes(256))
    complex_int = directory / "complex-int16.mrc"
    write_mrc_by_hand(complex_int, rng.integers(-9, 9, (2, 4, 6, 2)), 3)
    volumes = directory / "volume-stack.mrc"
    write_mrc_by_hand(volumes, rng.normal(size=(4, 4, 4)), 12, ispg=401, mz=2)
    return [image, stack, volume, extended, complex_int, volumes]


def _tiff_seeds(directory: Path) -> list[Path]:
    rng = np.random.default_rng(2)
    plain = {"photometric": "minisblack"}
    files = {
        "image.tif": (rng.integers(0, 999, (16, 16)).astype(np.uint16), plain),
        "stack.tif": (rng.normal(size=(4, 8, 8)).astype(np.float32), plain),
        "zlib.tif": (rng.integers(-99, 99, (3, 16, 16)).astype(np.int16), {**plain, "compression": "zlib"}),
        "big.tiff": (rng.integers(0, 9, (2, 8, 8)).astype(np.uint8), {**plain, "bigtiff": True}),
        "tiled-lzw.tif": (
            rng.integers(0, 9, (32, 32)).astype(np.uint8),
            {**plain, "tile": (16, 16), "compression": "lzw"},
        ),
        "lzw-predictor.tif": (
            rng.integers(0, 99, (2, 24, 16)).astype(np.uint16),
            {**plain, "compression": "lzw", "predictor": True, "rowsperstrip": 8},
        ),
        "packbits.tif": (rng.integers(0, 3, (24, 24)).astype(np.uint8), {**plain, "compression": "packbits"}),
    }
    paths = []
    for name, (values, options) in files.items():
        tifffile.imwrite(directory / name, values, **options)
        paths.append(directory / name)
    volume = directory / "volume.tif"
    vio.write_single(rng.normal(size=(3, 6, 5)).astype(np.float32), volume)
    return [*paths, volume]


def _eer_seeds(directory: Path) -> list[Path]:
    shape = (32, 32)
    options = [
        ("65000.eer", 65000, None, None),
        ("65001-strips.eer", 65001, None, 8),
        ("65002.eer", 65002, (7, 2, 2), None),
        ("65002-5-1-3.tif", 65002, (5, 1, 3), 16),
    ]
    return [
        random_movie(directory / name, 4, shape, compression, code, rows, seed=n).path
        for n, (name, compression, code, rows) in enumerate(options)
    ]


def _dm_seeds(directory: Path) -> list[Path]:
    values = (np.arange(6 * 5) - 7).reshape(6, 5)
    made = {
        "image.dm3": dm_file(3, [thumbnail(), image_entry(values.astype(np.float32), 2, [6])], [0]),
        "stack-big-endian.dm4": dm_file(
            4, [image_entry(values.reshape(2, 3, 5).astype(np.uint16), 10, [4], little=False)], little=False
        ),
        "complex.dm4": dm_file(
            4,
            [image_entry(values.astype(np.complex64), 3, [15, 0, 2, 0, 6, 0, 6], units=["nm", "nm"])],
        ),
    }
    paths = []
    for name, content in made.items():
        (directory / name).write_bytes(content)
        paths.append(directory / name)
    if DM_SAMPLES.is_file():  # without it, in_ci() fails test_fuzz's test of the real seeds
        with tarfile.open(DM_SAMPLES) as tar:
            for name in REAL_DM:
                (directory / name).write_bytes(tar.extractfile(name).read())
                paths.append(directory / name)
    return paths


def _ome_zarr(path: Path, values: np.ndarray, zarr_format: int, **array: object) -> Path:
    """A one-level OME-Zarr image of `values` (a channel axis, then space), its array made by zarr."""
    import zarr

    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    group.create_array("0", data=values, **array)
    axes = [{"name": "c", "type": "channel"}] * (values.ndim == 3)
    axes += [{"name": n, "type": "space", "unit": "nanometer"} for n in "yx"]
    scale = [{"type": "scale", "scale": [1.0] * (values.ndim - 2) + [0.5, 0.5]}]
    multiscales = [{"axes": axes, "datasets": [{"path": "0", "coordinateTransformations": scale}]}]
    if zarr_format == 2:
        group.attrs["multiscales"] = [{"version": "0.4", **multiscales[0]}]
    else:
        group.attrs["ome"] = {"version": "0.5", "multiscales": multiscales}
    return path


def _zarr_seeds(directory: Path) -> list[Path]:
    import numcodecs
    import zarr

    from vitrio.formats.zarr import OmeZarrFormat

    rng = np.random.default_rng(5)
    image = directory / "image.zarr"
    vio.write_single(
        rng.normal(size=(12, 16)).astype(np.float32),
        image,
        formats=[OmeZarrFormat.configured(chunks=8, levels=2)],
    )
    volume = directory / "volume-gzip.zarr"
    written = OmeZarrFormat.configured(chunks=4, levels=1, codec="gzip", voxel_size=3.5)
    vio.write_single(rng.integers(0, 999, (6, 10, 12)).astype(np.uint16), volume, formats=[written])
    raw = directory / "raw.zarr"
    written = OmeZarrFormat.configured(chunks=8, levels=1, codec=None)
    vio.write_single(rng.integers(-999, 999, (10, 12)).astype(np.int16), raw, formats=[written])
    filters = _ome_zarr(
        directory / "filters.zarr",
        rng.integers(-99, 99, (16, 16)).astype(np.int16),
        2,
        chunks=(8, 8),
        filters=[numcodecs.Shuffle(2), numcodecs.Delta("<i2")],
        compressor=numcodecs.Blosc(),
    )
    sharded = _ome_zarr(
        directory / "sharded.zarr",
        rng.normal(size=(2, 16, 16)).astype(np.float32),
        3,
        chunks=(1, 8, 8),
        shards=(1, 16, 16),
        filters=[zarr.codecs.TransposeCodec(order=(0, 2, 1))],
        compressors=[zarr.codecs.ZstdCodec()],
    )
    checked = _ome_zarr(
        directory / "checked.zarr",
        rng.integers(0, 255, (10, 12)).astype(">u2"),
        3,
        chunks=(5, 6),
        compressors=[zarr.codecs.Crc32cCodec(), zarr.codecs.GzipCodec()],
    )
    transposed = _ome_zarr(
        directory / "transposed.zarr",
        rng.normal(size=(9, 14)).astype(">f4"),
        3,
        chunks=(9, 7),
        filters=[zarr.codecs.TransposeCodec(order=(1, 0))],
        compressors=None,
    )
    return [
        image / ".zattrs",
        image / "0" / ".zarray",
        image / "0" / "0" / "0",
        volume / "0" / ".zarray",
        volume / "0" / "0" / "0" / "0",
        raw / ".zattrs",
        raw / "0" / "1" / "1",
        filters / "0" / ".zarray",
        filters / "0" / "1.0",
        sharded / "zarr.json",
        sharded / "0" / "zarr.json",
        sharded / "0" / "c" / "1" / "0" / "0",
        checked / "0" / "zarr.json",
        checked / "0" / "c" / "1" / "1",
        transposed / "0" / "c" / "0" / "1",
    ]


_HDF5_LAYOUTS = {
    "contiguous.h5": ((4, 8, 8), {}),
    "chunked.h5": ((4, 8, 8), {"chunks": (2, 4, 4)}),
    "gzip-shuffle.h5": ((4, 8, 8), {"chunks": (2, 4, 4), "compression": "gzip", "shuffle": True}),
    "stack.hdf5": ((2, 3, 4, 5), {"chunks": (1, 3, 2, 5), "compression": "gzip"}),
}


def _hdf5_seeds(directory: Path) -> list[Path]:
    rng = np.random.default_rng(5)
    paths = []
    for name, (shape, options) in _HDF5_LAYOUTS.items():
        with h5py.File(directory / name, "w") as file:
            file.create_dataset("data", data=rng.normal(size=shape).astype(np.float32), **options)
        paths.append(directory / name)
    return paths


_MAKERS = {
    "mrc": _mrc_seeds,
    "tiff": _tiff_seeds,
    "eer": _eer_seeds,
    "dm": _dm_seeds,
    "zarr": _zarr_seeds,
    "hdf5": _hdf5_seeds,
}


def regression_seeds(formats: tuple[str, ...] = FORMATS) -> list[Seed]:
    """The files of `regressions/` of `formats`: files the fuzzer found that once crashed, hung or
    allocated what they do not hold, each named after what is wrong with it."""
    seeds = []
    for path in sorted(REGRESSIONS.iterdir()):
        kind = _EXTENSIONS[path.suffix]
        if kind in formats:
            fields = tuple(_small_integers(path.read_bytes()))
            seeds.append(Seed(f"regression-{path.name}", kind, str(path), fields))
    return seeds


def make_seeds(directory: Path, formats: tuple[str, ...] = FORMATS) -> list[Seed]:
    """Write the valid seeds of `formats` into `directory`."""
    seeds = []
    for name in formats:
        folder = directory / name
        folder.mkdir(parents=True, exist_ok=True)
        for path in _MAKERS[name](folder):
            content = path.read_bytes()
            fields = set(_small_integers(content))
            if name == "mrc":
                fields.update(range(0, 224, 4))
            elif name in ("tiff", "eer"):
                fields.update(_tiff_fields(path))
            seed_name = f"{name}-{path.name}"
            if name == "zarr":  # a file of a store: named after both; its JSON's numbers are fields
                store = next(p for p in path.parents if p.suffix == ".zarr")
                inside = path.relative_to(store).as_posix().replace("/", "_")
                seed_name = f"zarr-{store.stem}-{inside}.zarr"
                if path.name in (".zattrs", ".zarray", ".zgroup", "zarr.json"):
                    fields.update(at for at, byte in enumerate(content) if chr(byte) in "0123456789-[]{}")
            seeds.append(Seed(seed_name, name, str(path), tuple(sorted(fields))))
    return seeds
