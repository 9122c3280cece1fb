"""ImageSource, PatchSource and ArraySource, read through a Dataset and directly, against numpy."""

from __future__ import annotations

import re
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio.data import ArraySource, Dataset, ImageSource, PatchSource, Source


def read(source: Source, rows, loader) -> np.ndarray:
    return Dataset({"value": source}).read_async(rows, loader=loader).get()["value"]


class CountingReaders(vio.ImageReaderProvider):
    """A provider that opens files at their paths and counts what it is asked for."""

    def __init__(self):
        self.backing = vio.reader_provider()
        self.queried: list[str] = []

    def acquire(self, key):
        return self.backing.acquire(key)

    def release(self, reader):
        self.backing.release(reader)

    def query_descriptor(self, key):
        self.queried.append(str(key))
        return self.backing.query_descriptor(key)


# ImageSource


@pytest.mark.parametrize(
    "rows",
    [
        3,
        -1,
        slice(2, 17, 3),
        slice(None, None, -1),
        [20, 0, 7, 7, 12],
        np.array([-2, 5, -21]),
        "mask",
        "repeats",
    ],
)
def test_image_source_reads_every_kind_of_row(stacks, loader, rows):
    source = ImageSource(stacks.locations)
    images = stacks.images
    if isinstance(rows, str) and rows == "mask":
        rows = np.arange(len(images)) % 3 == 1
    elif isinstance(rows, str):
        rows = [4] * 6 + [11, 4]
    dataset = Dataset({"image": source})
    if isinstance(rows, int):
        row = dataset[rows]
        np.testing.assert_array_equal(row["image"], images[rows])
        assert row["index"] == rows % len(images)
        return
    batch = dataset.read_async(rows, loader=loader).get()
    expected = np.arange(len(images))[rows]
    np.testing.assert_array_equal(batch["index"], expected)
    np.testing.assert_array_equal(batch["image"], images[expected])


def test_image_source_asks_each_file_once_and_takes_the_first_files_type(tmp_path, loader):
    ints = np.arange(4 * 6 * 5, dtype=np.int16).reshape(4, 6, 5)
    vio.write_stack(ints, tmp_path / "a.mrcs")
    vio.write_stack(ints[::-1].astype(np.float32), tmp_path / "b.mrcs")
    locations = [vio.ImageLocation(tmp_path / name, i) for i in range(4) for name in ("a.mrcs", "b.mrcs")]
    readers = CountingReaders()
    source = ImageSource(locations, readers=readers)
    assert sorted(readers.queried) == sorted({str(tmp_path / "a.mrcs"), str(tmp_path / "b.mrcs")})
    assert source.dtype == np.int16 and source.shape == (6, 5) and len(source) == 8
    values = read(source, [0, 2], loader)
    np.testing.assert_array_equal(values, np.stack([ints[0], ints[1]]))
    with pytest.raises(vio.DestinationTypeError, match="b.mrcs: holds float32"):
        read(source, [1], loader)  # int16 cannot hold the second file's float32 values
    as_float = ImageSource(locations, data_type="float32")
    assert as_float.dtype == np.float32
    assert read(as_float, [0], loader).dtype == np.float32


def test_image_source_of_whole_files(tmp_path, loader):
    rng = np.random.default_rng(3)
    singles = [rng.standard_normal((8, 6)).astype(np.float32) for _ in range(3)]
    for i, image in enumerate(singles):
        vio.write_single(image, tmp_path / f"single{i}.mrc")
    source = ImageSource([tmp_path / f"single{i}.mrc" for i in (2, 0, 1)])
    assert source.shape == (8, 6)
    np.testing.assert_array_equal(read(source, [0, 2], loader), np.stack([singles[2], singles[1]]))
    stack = rng.standard_normal((3, 8, 6)).astype(np.float32)
    vio.write_stack(stack, tmp_path / "whole.mrcs")
    whole = ImageSource([str(tmp_path / "whole.mrcs")] * 2)
    assert whole.shape == (3, 8, 6)
    np.testing.assert_array_equal(read(whole, [1], loader)[0], stack)


def test_image_source_reads_tiff_and_mrc_written_by_others(tmp_path, loader):
    rng = np.random.default_rng(4)
    pages = rng.integers(0, 1000, (5, 9, 7)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "pages.tif", pages)
    with mrcfile.new(tmp_path / "other.mrcs") as mrc:
        mrc.set_data(pages[::-1].astype(np.float32))
        mrc.header.ispg = 0
    locations = [vio.ImageLocation(tmp_path / "pages.tif", 4), vio.ImageLocation(tmp_path / "other.mrcs", 0)]
    source = ImageSource(locations, data_type="float32")
    np.testing.assert_array_equal(
        read(source, [0, 1], loader), np.stack([pages[4], pages[4]]).astype(np.float32)
    )


def test_rows_of_several_locations_stack_their_images(stacks, loader):
    locations = stacks.locations
    rows = [[locations[i], locations[(i + 3) % 21], locations[(i * 5) % 21]] for i in range(21)]
    source = ImageSource(rows)
    assert source.shape == (3, 12, 10) and len(source) == 21
    assert source.locations.shape == (21, 3) and source.locations[4, 1] == locations[7]
    images = stacks.images
    expected = np.stack([images[[i, (i + 3) % 21, (i * 5) % 21]] for i in range(21)])
    picked = [19, 2, 2, 0]
    np.testing.assert_array_equal(read(source, picked, loader), expected[picked])
    out = np.full((4, 12, 10, 3), np.nan, dtype=np.float32).transpose(0, 3, 1, 2)
    assert not out.flags.c_contiguous
    source.read_async(loader, np.array(picked), out).get()
    np.testing.assert_array_equal(out, expected[picked])


def test_image_source_locations_and_subset(stacks, loader):
    source = ImageSource(stacks.locations)
    locations = source.locations
    assert locations.shape == (21,) and len(locations) == 21
    assert list(locations) == stacks.locations and locations == stacks.locations
    held = np.asarray(locations)
    assert held.dtype == object and held.shape == (21,) and held.tolist() == stacks.locations
    assert locations[-1] == stacks.locations[-1] and list(locations[2:5]) == stacks.locations[2:5]
    part = source.subset(np.array([20, 3, 3]))
    assert len(part) == 3 and list(part.locations) == [stacks.locations[i] for i in (20, 3, 3)]
    np.testing.assert_array_equal(read(part, [2, 0], loader), stacks.images[[3, 20]])


def test_image_source_errors(stacks, tmp_path):
    vio.write_stack(np.zeros((2, 6, 6), np.float32), tmp_path / "other.mrcs")
    with pytest.raises(ValueError, match="shape"):
        ImageSource([*stacks.locations[:3], vio.ImageLocation(tmp_path / "other.mrcs", 0)])
    # The spec of vitrio.data says ValueError, the core says IndexError: the error is both.
    for kind in (IndexError, ValueError):
        with pytest.raises(kind, match=r"stack0\.mrcs: index 7 is past the end of a stack of 7"):
            ImageSource([stacks.locations[0], vio.ImageLocation(stacks.paths[0], 7)])
    with pytest.raises(ValueError, match="no|at least one"):
        ImageSource([])
    with pytest.raises(ValueError, match="as many locations"):
        ImageSource([stacks.locations[:2], stacks.locations[:3]])


def test_image_source_without_check_asks_only_the_first_file(stacks, loader):
    readers = CountingReaders()
    late = vio.ImageLocation(stacks.paths[2], 30)
    source = ImageSource([*stacks.locations[:2], late], readers=readers, check=False)
    assert readers.queried == [str(stacks.paths[0])]
    np.testing.assert_array_equal(read(source, [1], loader), stacks.images[[1]])
    with pytest.raises(IndexError, match=f"{re.escape(str(stacks.paths[2]))}: index 30 is past the end"):
        read(source, [2], loader)


# PatchSource


def crop(image: np.ndarray, centre, shape, fill) -> np.ndarray:
    """The patch of `shape` whose index shape // 2 is `centre` of `image`, fill beyond it: the oracle."""
    margin = max(*shape, *centre)
    padded = np.pad(image, margin, constant_values=fill)
    start = [c - s // 2 + margin for c, s in zip(centre, shape)]
    return padded[tuple(slice(a, a + s) for a, s in zip(start, shape))]


def test_patches_2d_match_numpy_crops_at_edges_and_beyond(tmp_path, loader):
    rng = np.random.default_rng(5)
    micrographs = [rng.standard_normal((40, 50)).astype(np.float32) for _ in range(2)]
    for i, micrograph in enumerate(micrographs):
        vio.write_single(micrograph, tmp_path / f"mic{i}.mrc")
    centres = np.array([[20, 25], [0, 0], [39, 49], [0, 30], [45, 10], [100, 100], [3, 48], [21, 2]])
    images = [tmp_path / f"mic{i % 2}.mrc" for i in range(len(centres))]
    for shape in [(8, 8), (7, 9)]:
        source = PatchSource(images, centres, shape, fill=-5)
        assert source.shape == shape and source.dtype == np.float32
        values = read(source, np.arange(len(centres)), loader)
        for i, centre in enumerate(centres):
            np.testing.assert_array_equal(
                values[i], crop(micrographs[i % 2], centre, shape, -5), err_msg=str(i)
            )


def test_patches_3d_and_of_an_image_of_a_stack(tmp_path, loader):
    rng = np.random.default_rng(6)
    volume = rng.standard_normal((20, 18, 16)).astype(np.float32)
    vio.write_single(volume, tmp_path / "tomogram.mrc")
    centres = np.array([[10, 9, 8], [0, 17, 15], [19, 0, 3], [25, 5, 5]])
    source = PatchSource([tmp_path / "tomogram.mrc"] * 4, centres, (6, 5, 4), data_type="float64", fill=1.5)
    assert source.dtype == np.float64
    values = read(source, [3, 2, 1, 0], loader)
    for i, row in enumerate([3, 2, 1, 0]):
        np.testing.assert_array_equal(values[i], crop(volume, centres[row], (6, 5, 4), 1.5))
    micrographs = rng.integers(-100, 100, (3, 30, 30)).astype(np.int16)
    vio.write_stack(micrographs, tmp_path / "micrographs.mrcs")
    images = [vio.ImageLocation(tmp_path / "micrographs.mrcs", i) for i in (2, 0)]
    patches = PatchSource(images, [[5, 5], [29, 1]], (4, 4))
    assert patches.dtype == np.int16
    values = read(patches, [0, 1], loader)
    np.testing.assert_array_equal(values[0], crop(micrographs[2], (5, 5), (4, 4), 0))
    np.testing.assert_array_equal(values[1], crop(micrographs[0], (29, 1), (4, 4), 0))


def test_patch_source_images_centres_and_subset(tmp_path, loader):
    image = np.arange(20 * 20, dtype=np.float32).reshape(20, 20)
    for name in ("a.mrc", "b.mrc", "c.mrc"):
        vio.write_single(image * len(name), tmp_path / name)
    names = ["a.mrc", "b.mrc", "a.mrc", "c.mrc", "b.mrc"]
    centres = [[2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    source = PatchSource([tmp_path / n for n in names], centres, (3, 3))
    assert source.images == [vio.ImageLocation(tmp_path / n) for n in ("a.mrc", "b.mrc", "c.mrc")]
    np.testing.assert_array_equal(source.centres, centres)
    part = source.subset([4, 0])
    assert part.images == [vio.ImageLocation(tmp_path / n) for n in ("a.mrc", "b.mrc")]
    np.testing.assert_array_equal(part.centres, [[10, 11], [2, 3]])
    values = read(part, [0, 1], loader)
    np.testing.assert_array_equal(values[0], crop(image * 5, (10, 11), (3, 3), 0))
    np.testing.assert_array_equal(values[1], crop(image * 5, (2, 3), (3, 3), 0))


def test_patch_source_errors(tmp_path):
    vio.write_single(np.zeros((10, 10), np.float32), tmp_path / "image.mrc")
    vio.write_single(np.zeros((4, 10, 10), np.float32), tmp_path / "volume.mrc")
    vio.write_stack(np.zeros((2, 10, 10), np.float32), tmp_path / "stack.mrcs")
    image = tmp_path / "image.mrc"
    with pytest.raises(ValueError, match="rank"):
        PatchSource([image], [[1, 1]], (3, 3, 3))
    with pytest.raises(ValueError, match="cannot be cropped"):
        PatchSource([tmp_path / "volume.mrc"], [[1, 1]], (3, 3))
    with pytest.raises(ValueError, match="2 centres for 1 images"):
        PatchSource([image], [[1, 1], [2, 2]], (3, 3))
    with pytest.raises(ValueError, match="negative"):
        PatchSource([image, image], [[1, 1], [2, -2]], (3, 3))
    with pytest.raises(ValueError, match="at least one row"):
        PatchSource([], np.zeros((0, 2), np.int64), (3, 3))
    with pytest.raises(ValueError, match="is a stack"):
        PatchSource([tmp_path / "stack.mrcs"], [[1, 1]], (3, 3))
    for kind in (IndexError, ValueError):
        with pytest.raises(kind, match=r"stack\.mrcs: index 2 is past the end of a stack of 2"):
            PatchSource([vio.ImageLocation(tmp_path / "stack.mrcs", 2)], [[1, 1]], (3, 3))
    with pytest.raises(TypeError, match="integers"):
        PatchSource([image], [[1.5, 1.0]], (3, 3))


def test_patch_source_without_check_asks_only_the_first_image(tmp_path):
    vio.write_single(np.zeros((10, 10), np.float32), tmp_path / "image.mrc")
    readers = CountingReaders()
    PatchSource(
        [tmp_path / "image.mrc", tmp_path / "missing.mrc"],
        [[1, 1], [2, 2]],
        (3, 3),
        readers=readers,
        check=False,
    )
    assert readers.queried == [str(tmp_path / "image.mrc")]
    with pytest.raises(FileNotFoundError, match="missing.mrc: no such file"):
        PatchSource([tmp_path / "image.mrc", tmp_path / "missing.mrc"], [[1, 1], [2, 2]], (3, 3))


# ArraySource


def test_array_source_uses_the_array_without_a_copy(loader):
    array = np.arange(30 * 4, dtype=np.float64).reshape(30, 4)
    source = ArraySource(array)
    assert source.array is array and source.shape == (4,) and source.dtype == np.float64
    import torch

    tensor = torch.arange(12, dtype=torch.int32).reshape(6, 2)
    from_torch = ArraySource(tensor)
    assert np.shares_memory(from_torch.array, tensor.numpy())
    np.testing.assert_array_equal(read(source, [29, 0, 0], loader), array[[29, 0, 0]])
    part = source.subset([3, 1])
    np.testing.assert_array_equal(part.array, array[[3, 1]])
    with pytest.raises(
        ValueError, match="an ArraySource needs an array with a value for each row, not a scalar"
    ):
        ArraySource(3.0)


def test_array_source_copies_large_batches_on_the_loaders_threads(loader):
    rng = np.random.default_rng(7)
    images = rng.standard_normal((64, 64, 64)).astype(np.float32)
    source = ArraySource(images)
    rows = rng.integers(0, 64, 40)
    out = np.empty((40, 64, 64), np.float32)
    completion = source.read_async(loader, rows, out)
    completion.get()
    np.testing.assert_array_equal(out, images[rows])


@pytest.mark.parametrize("layout", ["columns of a DataFrame", "every other row", "every other column"])
def test_array_source_of_an_array_not_in_row_order_reads_its_rows_in_place(loader, layout, monkeypatch):
    """A DataFrame's columns are a transposed array: a batch takes its rows, never a copy of all of it."""
    import pandas as pd

    frame = pd.DataFrame({"u": np.arange(1000.0), "v": -np.arange(1000.0), "w": np.arange(1000.0) / 3})
    array = {
        "columns of a DataFrame": frame[["u", "v"]].to_numpy(),
        "every other row": frame.to_numpy()[::2],
        "every other column": np.ascontiguousarray(frame.to_numpy())[:, ::2],
    }[layout]
    assert not array.flags.c_contiguous
    taken = []
    original = np.take
    monkeypatch.setattr(
        np, "take", lambda values, *a, **k: taken.append(values.size) or original(values, *a, **k)
    )
    rows = [499, 0, 3, 3]
    np.testing.assert_array_equal(read(ArraySource(array), rows, loader), array[rows])
    assert all(size < array.size for size in taken)
    for column in (array[:, 0], np.ascontiguousarray(array[:, 0])):  # a value a row, one row or several
        np.testing.assert_array_equal(read(ArraySource(column), [7], loader), column[[7]])
        np.testing.assert_array_equal(read(ArraySource(column), [7, 2], loader), column[[7, 2]])


def test_sources_follow_the_protocol(stacks):
    assert isinstance(ImageSource(stacks.locations), Source)
    assert isinstance(ArraySource(np.zeros(3)), Source)
    assert not isinstance(np.zeros(3), Source)


def test_source_of_ones_own_is_a_field(loader):
    class Squares:
        shape = ()
        dtype = np.dtype(np.int64)

        def __len__(self):
            return 10

        def read_async(self, loader, rows, out):
            out[...] = np.asarray(rows) ** 2
            return vio.Completion()

        def subset(self, rows):
            raise NotImplementedError

    dataset = Dataset({"square": Squares(), "name": [f"n{i}" for i in range(10)]})
    batch = dataset.read_async([3, 9], loader=loader).get()
    np.testing.assert_array_equal(batch["square"], [9, 81])
    np.testing.assert_array_equal(batch["name"], ["n3", "n9"])


def test_reading_a_file_deleted_since_names_the_file_and_row(stacks, loader):
    source = ImageSource(stacks.locations)
    Path(stacks.paths[1]).unlink()
    with pytest.raises(FileNotFoundError, match=rf"(?s){stacks.paths[1]}.*row 9 \(3@{stacks.paths[1]}\)"):
        read(source, [0, 9, 10], loader)


def test_reading_a_patch_of_a_deleted_image_names_the_file_and_row(tmp_path, loader):
    for name in ("a.mrc", "b.mrc"):
        vio.write_single(np.zeros((20, 20), np.float32), tmp_path / name)
    source = PatchSource(
        [tmp_path / "a.mrc", tmp_path / "b.mrc", tmp_path / "b.mrc"], [[5, 5], [6, 7], [8, 9]], (4, 4)
    )
    (tmp_path / "b.mrc").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"(?s)b\.mrc.*row 1 \(a patch at \[6, 7\] of .*b\.mrc\) and 1 more"
    ):
        read(source, [0, 1, 2], loader)
