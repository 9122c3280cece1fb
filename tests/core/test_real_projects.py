"""Files as cryoSPARC, RELION, mrcfile and tifffile make them: stacks that say volume, pixel sizes, types.

Each file is written the way the program that makes it does (mrcfile,
tifffile), never by vitrio, so that what is tested is reading theirs.
"""

from __future__ import annotations

import gc

import mrcfile
import numpy as np
import pytest
import tifffile
import torch

import vitrio as vio
from vitrio.data import Dataset, ImageSource, PatchSource


@pytest.fixture
def particles(tmp_path, rng):
    """A particle stack as cryoSPARC writes it: a .mrc whose header says volume (ispg 1)."""
    values = rng.normal(size=(7, 32, 30)).astype(np.float32)
    path = tmp_path / "J12_particles.mrc"
    with mrcfile.new(str(path)) as mrc:
        mrc.set_data(values)
        mrc.voxel_size = 1.06
    with mrcfile.open(str(path)) as mrc:
        assert mrc.header.ispg == 1 and mrc.is_volume()  # the header says volume
    return path, values


@pytest.fixture
def loader():
    return vio.loader(workers=2)


def test_an_index_into_a_single_volume_reads_its_section(particles, loader):
    path, values = particles
    assert vio.query_descriptor(path) == vio.ImageDescriptor((7, 32, 30), 3, "float32")  # as the header says
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(path, 6)), values[6])
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(path, 0)), values[0])
    np.testing.assert_array_equal(vio.read(path), values)  # the whole file is the volume
    out = np.zeros((3, 32, 30), np.float64)
    vio.read_batch_async(loader, out, [vio.ImageLocation.from_string(f"{i}@{path}") for i in (5, 1, 2)]).get()
    np.testing.assert_array_equal(out, values[[4, 0, 1]])  # "7@" in a STAR file is the 7th, index 6
    with pytest.raises(IndexError, match="index 7 is past the last section of a volume of 7 sections"):
        vio.read(vio.ImageLocation(path, 7))
    out = np.zeros((1, 32, 30), np.float32)
    with pytest.raises(IndexError, match="volume of 7 sections"):
        vio.read_batch_async(loader, out, [vio.ImageLocation(path, 9)]).get()


def test_sources_read_sections_of_a_single_volume_and_refuse_an_index_into_one_image(
    particles, loader, tmp_path
):
    path, values = particles
    source = ImageSource([vio.ImageLocation(path, i) for i in (6, 0, 3)])
    assert source.shape == (32, 30)
    batch = Dataset({"image": source}).read_async([0, 2], loader=loader).get()
    np.testing.assert_array_equal(batch["image"], values[[6, 3]])
    with pytest.raises(IndexError, match="volume of 7 sections"):
        ImageSource([vio.ImageLocation(path, 7)])
    patches = PatchSource([vio.ImageLocation(path, 4)], [[10, 12]], (8, 6))
    batch = Dataset({"patch": patches}).read_async([0], loader=loader).get()
    np.testing.assert_array_equal(batch["patch"][0], values[4, 6:14, 9:15])
    image = tmp_path / "micrograph.mrc"
    with mrcfile.new(str(image)) as mrc:
        mrc.set_data(values[0])
    with pytest.raises(ValueError, match="holds a single image"):
        ImageSource([vio.ImageLocation(image, 0)])
    with pytest.raises(ValueError, match="holds a single image"):
        PatchSource([vio.ImageLocation(image, 0)], [[4, 4]], (4, 4))


def test_query_metadata_gives_the_pixel_size_of_mrc_and_tiff_files(particles, tmp_path):
    path, _ = particles
    metadata = vio.query_metadata(vio.ImageLocation(path, 3))
    assert metadata.descriptor == vio.query_descriptor(path)
    assert metadata.format_name == "mrc"
    assert metadata.voxel_size == pytest.approx((1.06, 1.06, 1.06))
    tiff = tmp_path / "plain.tif"
    tifffile.imwrite(tiff, np.zeros((4, 5), np.uint16))
    assert vio.query_metadata(tiff) == vio.ImageMetadata(
        vio.ImageDescriptor((4, 5), 2, "uint16"), None, "tiff"
    )


@pytest.mark.parametrize("stack", [False, True])
def test_mrc_files_keep_the_voxel_size_written(tmp_path, rng, stack):
    values = rng.normal(size=(3, 8, 10)).astype(np.float32)
    path = tmp_path / ("s.mrcs" if stack else "v.mrc")
    if stack:
        vio.write_stack(values, path, voxel_size=(1.5, 2.5))
        expected = (1.5, 2.5)
    else:
        vio.write_single(values, path, voxel_size=(4.0, 1.5, 2.5))
        expected = (4.0, 1.5, 2.5)
    with mrcfile.open(str(path), permissive=False) as mrc:
        assert (float(mrc.voxel_size.x), float(mrc.voxel_size.y)) == pytest.approx((2.5, 1.5))
        assert float(mrc.voxel_size.z) == pytest.approx(2.5 if stack else 4.0)
    assert vio.query_metadata(path).voxel_size == pytest.approx(expected)


def test_tiff_files_keep_the_voxel_size_written(tmp_path, rng):
    image = tmp_path / "image.tif"
    vio.write_single(rng.normal(size=(8, 10)).astype(np.float32), image, voxel_size=0.8)
    with tifffile.TiffFile(image) as tiff:
        assert tiff.imagej_metadata["unit"] == "nm"
        assert tiff.pages[0].resolution == pytest.approx((10 / 0.8, 10 / 0.8))  # pixels per nm
    assert vio.query_metadata(image).voxel_size == pytest.approx((0.8, 0.8))
    volume = tmp_path / "volume.tif"
    vio.write_single(rng.normal(size=(3, 8, 10)).astype(np.float32), volume, voxel_size=(5.0, 2.0, 2.5))
    with tifffile.TiffFile(volume) as tiff:
        assert tiff.imagej_metadata["spacing"] == pytest.approx(0.5)  # nm
        assert tiff.imagej_metadata["unit"] == "nm"
        assert tiff.pages[0].resolution == pytest.approx((1 / 0.25, 1 / 0.2))
    assert vio.query_metadata(volume).voxel_size == pytest.approx((5.0, 2.0, 2.5))
    assert vio.query_descriptor(volume) == vio.ImageDescriptor((3, 8, 10), 3, "float32")


def test_a_declared_file_keeps_its_voxel_size_and_bad_ones_are_refused(tmp_path):
    with vio.writer_provider() as writers, vio.saver(writers, workers=1) as saver:
        writers.declare(tmp_path / "a.mrcs", vio.ImageDescriptor((2, 4, 4), 2, "float32"), voxel_size=1.2)
        vio.write_batch_async(
            saver,
            np.ones((2, 4, 4), np.float32),
            [vio.ImageLocation(tmp_path / "a.mrcs", i) for i in range(2)],
        ).get()
        with pytest.raises(ValueError, match="voxel size"):
            writers.declare(
                tmp_path / "b.mrc", vio.ImageDescriptor((4, 4), 2, "float32"), voxel_size=(1, 2, 3)
            )
        with pytest.raises(ValueError, match="voxel size"):
            vio.write_single(np.ones((4, 4), np.float32), tmp_path / "c.mrc", voxel_size=-1.0)
    assert vio.query_metadata(tmp_path / "a.mrcs").voxel_size == pytest.approx((1.2, 1.2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mrcs"]


@pytest.mark.parametrize(
    ("stored", "into"),
    [
        ("float32", "int8"),
        ("float32", "bool"),
        ("int16", "uint16"),
        ("uint16", "int8"),
        ("complex64", "float32"),
    ],
)
def test_a_destination_that_cannot_hold_the_values_is_refused(tmp_path, stored, into, loader):
    path = tmp_path / "values.mrc"
    values = (np.arange(20).reshape(4, 5) - 3).astype(stored)
    with mrcfile.new(str(path)) as mrc:
        mrc.set_data(values)
    with pytest.raises(vio.DestinationTypeError, match=f"holds {vio.NumericalType(stored).name} values"):
        vio.read(path, out=np.zeros((4, 5), into))
    with pytest.raises(vio.DestinationTypeError):
        vio.read(path, data_type=into)
    with pytest.raises(vio.DestinationTypeError):
        vio.read_batch_async(loader, np.zeros((1, 4, 5), into), [path]).get()
    with pytest.raises(vio.DestinationTypeError):
        ImageSource([path], data_type=into)


def test_destinations_that_hold_the_values_are_taken(tmp_path, loader):
    path = tmp_path / "counts.mrc"
    values = np.arange(20, dtype=np.uint16).reshape(4, 5)
    with mrcfile.new(str(path)) as mrc:
        mrc.set_data(values)
    for into in ("uint16", "int32", "uint64", "float16", "float32", "complex64"):
        np.testing.assert_array_equal(vio.read(path, out=np.zeros((4, 5), into)), values)
    with pytest.raises(vio.DestinationTypeError, match="holds numbers"):
        vio.read_batch_async(loader, np.zeros((1, 4, 5), object), [path])  # at the call


def test_torch_and_numpy_types_name_data_types(tmp_path):
    path = tmp_path / "v.mrc"
    vio.write_single(np.ones((4, 5), np.int16), path)
    assert vio.read(path, data_type=torch.float32).dtype == np.float32
    assert vio.read(path, data_type=np.float64).dtype == np.float64
    assert vio.NumericalType(torch.complex64) is vio.NumericalType.complex_float32
    assert vio.ImageDescriptor((2, 2), 2, torch.uint8).data_type is vio.NumericalType.uint8
    assert ImageSource([path], data_type=torch.float16).dtype == np.float16
    with pytest.raises(ValueError, match="bfloat16"):
        vio.NumericalType(torch.bfloat16)


def test_leaving_a_provider_block_closes_its_files_and_refuses_short_ones(tmp_path):
    whole, short = tmp_path / "whole.mrcs", tmp_path / "short.mrcs"
    with (
        pytest.raises(
            vio.IncompleteFileError, match=r"short.mrcs: 1 of its 2 images were never written \(1\)"
        ),
        vio.writer_provider() as writers,
    ):
        for path in (whole, short):
            writers.declare(path, vio.ImageDescriptor((2, 3, 3), 2, "float32"))
        writers.writer(whole).write_run(0, [np.ones((3, 3), np.float32)] * 2)
        writers.writer(short).write_run(0, [np.ones((3, 3), np.float32)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["whole.mrcs"]
    writers = vio.writer_provider()
    writers.declare(short, vio.ImageDescriptor((2, 3, 3), 2, "float32"))
    writers.writer(short).write_run(1, [np.full((3, 3), 2, np.float32)])
    writers.close(short, allow_partial=True)
    np.testing.assert_array_equal(vio.read(short)[:, 0, 0], [0, 2])


def test_a_provider_collected_with_files_open_warns_with_their_names(tmp_path):
    writers = vio.writer_provider()
    writers.declare(tmp_path / "forgotten.mrc", vio.ImageDescriptor((3, 3), 2, "float32"))
    writers.writer(tmp_path / "forgotten.mrc").write_run(0, [np.ones((3, 3), np.float32)])
    with pytest.warns(ResourceWarning, match="forgotten.mrc"):
        del writers
        gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_a_cryosparc_cs_file_names_sections_of_its_particle_stack(particles, loader):
    path, values = particles
    table = np.zeros(3, dtype=[("uid", "<u8"), ("blob/path", "S64"), ("blob/idx", "<u4")])
    table["uid"] = [11, 12, 13]
    table["blob/path"] = [f">{path.name}".encode()] * 3
    table["blob/idx"] = [6, 0, 2]
    metadata = path.parent / "J12_passthrough_particles.cs"
    with open(metadata, "wb") as file:
        np.save(file, table)
    locations = vio.data.particle_locations(vio.data.read_particles(metadata), metadata)
    assert [location.index_in_stack for location in locations] == [6, 0, 2]
    batch = Dataset({"image": ImageSource(locations)}).read_async([0, 1, 2], loader=loader).get()
    np.testing.assert_array_equal(batch["image"], values[[6, 0, 2]])


def test_leaving_a_saver_block_closes_the_files_of_its_writers(tmp_path):
    writers = vio.writer_provider()
    writers.declare(tmp_path / "a.tif", vio.ImageDescriptor((2, 3, 3), 2, "uint16"))
    with vio.saver(writers, workers=1) as saver:
        locations = [vio.ImageLocation(tmp_path / "a.tif", i) for i in range(2)]
        vio.write_batch_async(saver, np.arange(18, dtype=np.uint16).reshape(2, 3, 3), locations).get()
    assert writers.file_count == 0
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "a.tif"), np.arange(18).reshape(2, 3, 3))


@pytest.mark.parametrize(
    ("shape", "dtype"), [((1, 4, 5), "float32"), ((3, 4, 5), "float64"), ((2, 3, 4, 5), "uint16")]
)
def test_tiff_volumes_of_any_type_and_depth_keep_their_shape_and_pixel_size(tmp_path, shape, dtype):
    path = tmp_path / "v.tif"
    values = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    if len(shape) == 4:
        vio.write_stack(values, path, voxel_size=(3.0, 2.0, 2.0))
    else:
        vio.write_single(values, path, voxel_size=(3.0, 2.0, 2.0))
    metadata = vio.query_metadata(path)
    assert metadata.descriptor == vio.ImageDescriptor(shape, 3, dtype)
    # ImageJ holds uint16 and float32, OME-XML float64; neither a volume of one section
    source = None if shape[0] == 1 else "OME-XML" if dtype == "float64" else "ImageJ"
    assert metadata.voxel_size == pytest.approx(None if source is None else (3.0, 2.0, 2.0))
    assert metadata.voxel_size_source == source
    np.testing.assert_array_equal(vio.read(path), values)
