"""TIFF against tifffile, both ways: pages, BigTIFF, compression, byte orders, every type."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

import vitrio as vio

from .helpers import NUMPY_TYPES

DTYPES = list(NUMPY_TYPES)


def _values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    if dtype.kind == "f":
        return rng.normal(0, 100, size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


VARIANTS = {
    "plain": {},
    "bigtiff": {"bigtiff": True},
    "zlib": {"compression": "zlib"},
    "bigtiff-zlib": {"bigtiff": True, "compression": "zlib"},
    "big-endian": {"byteorder": ">"},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_reads_what_tifffile_writes(tmp_path, rng, dtype, variant):
    options = VARIANTS[variant]
    image = _values(rng, (6, 7), dtype)
    pages = _values(rng, (5, 6, 7), dtype)
    tifffile.imwrite(tmp_path / "one.tif", image, photometric="minisblack", **options)
    tifffile.imwrite(tmp_path / "many.tiff", pages, photometric="minisblack", **options)
    with tifffile.TiffFile(tmp_path / "many.tiff") as tif:
        assert tif.is_bigtiff == options.get("bigtiff", False)
        assert len(tif.pages) == 5
    assert vio.query_descriptor(tmp_path / "one.tif") == vio.ImageDescriptor((6, 7), 2, dtype)
    assert vio.query_descriptor(tmp_path / "many.tiff") == vio.ImageDescriptor((5, 6, 7), 2, dtype)
    np.testing.assert_array_equal(vio.read(tmp_path / "one.tif"), image)
    np.testing.assert_array_equal(vio.read(tmp_path / "many.tiff"), pages)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "many.tiff", 3)), pages[3])

    loader = vio.loader(workers=2)
    batch = np.zeros((4, 6, 7), dtype=np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    locations = [vio.ImageLocation(tmp_path / "many.tiff", i) for i in (4, 0, 1, 2)]
    vio.read_batch_async(loader, batch, locations).get()
    np.testing.assert_array_equal(batch, pages[[4, 0, 1, 2]].astype(batch.dtype))
    patches = np.zeros((2, 3, 4), dtype=dtype)
    vio.read_patches_async(
        loader, patches, vio.ImageLocation(tmp_path / "many.tiff", 2), [[3, 3], [0, 6]]
    ).get()
    np.testing.assert_array_equal(patches[0], pages[2, 2:5, 1:5])
    np.testing.assert_array_equal(patches[1][1:, :3], pages[2, 0:2, 4:7])
    assert (patches[1][0] == 0).all() and (patches[1][:, 3] == 0).all()


VOLUME_VARIANTS = {
    "pages": {},
    "pages-zlib": {"compression": "zlib"},
    "depth": {"volumetric": True},
    "depth-zlib": {"volumetric": True, "compression": "zlib"},
    "depth-tiles-zlib": {"volumetric": True, "tile": (2, 16, 16), "compression": "zlib"},
}


@pytest.mark.parametrize("variant", list(VOLUME_VARIANTS))
def test_reads_tifffile_volumes_and_volume_stacks(tmp_path, rng, variant):
    options = {"photometric": "minisblack", **VOLUME_VARIANTS[variant]}
    volume = _values(rng, (4, 5, 6), "float32")
    volumes = _values(rng, (3, 4, 5, 6), "uint16")
    tifffile.imwrite(tmp_path / "v.tif", volume, metadata={"axes": "ZYX"}, **options)
    tifffile.imwrite(tmp_path / "vs.tif", volumes, metadata={"axes": "IZYX"}, **options)
    assert vio.query_descriptor(tmp_path / "v.tif") == vio.ImageDescriptor((4, 5, 6), 3, "float32")
    assert vio.query_descriptor(tmp_path / "vs.tif") == vio.ImageDescriptor((3, 4, 5, 6), 3, "uint16")
    np.testing.assert_array_equal(vio.read(tmp_path / "v.tif"), volume)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "vs.tif", 2)), volumes[2])
    out = np.zeros((2, 4, 5, 6), np.float32)
    locations = [vio.ImageLocation(tmp_path / "vs.tif", 1), vio.ImageLocation(tmp_path / "vs.tif", 0)]
    vio.read_batch_async(vio.loader(workers=2), out, locations).get()
    np.testing.assert_array_equal(out, volumes[[1, 0]])


def test_reads_imagej_hyperstack_volume(tmp_path, rng):
    volume = _values(rng, (4, 5, 6), "float32")
    tifffile.imwrite(tmp_path / "ij.tif", volume, imagej=True, metadata={"axes": "ZYX"})
    assert vio.query_descriptor(tmp_path / "ij.tif") == vio.ImageDescriptor((4, 5, 6), 3, "float32")
    np.testing.assert_array_equal(vio.read(tmp_path / "ij.tif"), volume)


@pytest.mark.parametrize("dtype", [*DTYPES, "bool"])
def test_tifffile_reads_what_vitrio_writes(tmp_path, rng, dtype):
    if dtype == "bool":
        image, stack = rng.integers(0, 2, (6, 7)).astype(bool), rng.integers(0, 2, (3, 6, 7)).astype(bool)
        volume, volumes = (
            rng.integers(0, 2, (4, 6, 7)).astype(bool),
            rng.integers(0, 2, (2, 3, 6, 7)).astype(bool),
        )
        stored = "uint8"
    else:
        image, stack = _values(rng, (6, 7), dtype), _values(rng, (3, 6, 7), dtype)
        volume, volumes = _values(rng, (4, 6, 7), dtype), _values(rng, (2, 3, 6, 7), dtype)
        stored = dtype
    vio.write_single(image, tmp_path / "image.tif")
    vio.write_stack(stack, tmp_path / "stack.tiff")
    vio.write_single(volume, tmp_path / "volume.tif")
    vio.write_stack(volumes, tmp_path / "volumes.tif")
    cases = [("image.tif", image, 2, 1), ("stack.tiff", stack, 2, 3), ("volume.tif", volume, 3, 4)]
    cases.append(("volumes.tif", volumes, 3, 6))
    for name, values, core_rank, pages in cases:
        path = tmp_path / name
        with tifffile.TiffFile(path) as tif:
            assert len(tif.pages) == pages, name
            assert tif.series[0].shape == values.shape, name
            assert tif.series[0].axes.endswith("ZYX" if core_rank == 3 else "YX"), name
            np.testing.assert_array_equal(tif.asarray(), values.astype(stored))
        descriptor = vio.query_descriptor(path)
        assert descriptor == vio.ImageDescriptor(values.shape, core_rank, stored), name
        np.testing.assert_array_equal(vio.read(path), values.astype(stored))


def test_written_descriptor_round_trips(tmp_path, rng):
    volumes = _values(rng, (2, 3, 4, 5), "int16")
    descriptor = vio.ImageDescriptor(volumes.shape, 3, "float32")
    vio.write(volumes, tmp_path / "d.tif", descriptor)
    assert vio.query_descriptor(tmp_path / "d.tif") == descriptor
    np.testing.assert_array_equal(vio.read(tmp_path / "d.tif"), volumes.astype(np.float32))


def test_rgb_tiff_is_refused_naming_the_file(tmp_path, rng):
    tifffile.imwrite(tmp_path / "rgb.tif", _values(rng, (6, 7, 3), "uint8"), photometric="rgb")
    with pytest.raises(ValueError, match="rgb.tif"):
        vio.read(tmp_path / "rgb.tif")


def test_tiff_recognized_by_contents(tmp_path, rng):
    image = _values(rng, (6, 7), "uint16")
    tifffile.imwrite(tmp_path / "image.dat", image)
    np.testing.assert_array_equal(vio.read(tmp_path / "image.dat"), image)


def test_tiled_compressed_tiff(tmp_path, rng):
    image = _values(rng, (40, 48), "float32")
    tifffile.imwrite(tmp_path / "tiled.tif", image, tile=(16, 16), compression="zlib")
    np.testing.assert_array_equal(vio.read(tmp_path / "tiled.tif"), image)
    patches = np.zeros((1, 10, 10), np.float32)
    vio.read_patches_async(vio.loader(workers=1), patches, tmp_path / "tiled.tif", [[20, 20]]).get()
    np.testing.assert_array_equal(patches[0], image[15:25, 15:25])
