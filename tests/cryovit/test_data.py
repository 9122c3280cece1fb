"""Tests of cryovit.data: tomograms and labels read from files written by mrcfile, tifffile and h5py,
crops, batches, model results and written predictions."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import h5py
import mrcfile
import numpy as np
import pytest
import tifffile
import torch
from torch.utils.data import DataLoader

import vitrio as vio
from cryovit.data import LABEL_PADDING, TomogramDataset, collate_tomograms, model_result, write_predictions
from cryovit.types import BatchedModelResult, BatchedTomogramData, FileData, TomogramData

SHAPE = (6, 10, 12)
KINDS = ["mrc", "mrc-int16", "mrc-sections", "tiff", "hdf5", "hdf5-chunked"]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def write_tomogram(path: Path, values: np.ndarray, kind: str) -> Path:
    """Writes ``values`` with an independent writer, as ``kind`` says; returns the file's path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind.startswith("mrc"):
        path = path.with_suffix(".mrc")
        with mrcfile.new(path, overwrite=True) as mrc:
            mrc.set_data(values.astype(np.int16) if kind == "mrc-int16" else values)
            if kind == "mrc-sections":
                mrc.set_image_stack()
    elif kind == "tiff":
        path = path.with_suffix(".tif")
        tifffile.imwrite(path, values)
    else:
        path = path.with_suffix(".hdf5")
        chunks = (2, 4, 4) if kind == "hdf5-chunked" else None
        with h5py.File(path, "w") as file:
            file.create_dataset("data", data=values, chunks=chunks, compression="gzip" if chunks else None)
    return path


def written(values: np.ndarray, kind: str) -> np.ndarray:
    """The values a file of ``kind`` holds, as float32."""
    return (values.astype(np.int16) if kind == "mrc-int16" else values).astype(np.float32)


def random_volume(rng: np.random.Generator, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    return (rng.standard_normal(shape) * 100).astype(np.float32)


def make_tomogram(
    sample: str = "s",
    name: str = "t.mrc",
    depth: int = 3,
    hw: tuple[int, int] = (4, 5),
    split_id: int | None = None,
) -> TomogramData:
    return TomogramData(
        sample=sample,
        tomo_name=name,
        split_id=split_id,
        data=torch.randn(1, depth, *hw),
        label=torch.rand(depth, *hw) > 0.5,
        batch_size=[],
    )


# reading tomograms


@pytest.mark.parametrize("kind", KINDS)
def test_tomogram_reads_as_written(tmp_path: Path, rng: np.random.Generator, kind: str) -> None:
    values = random_volume(rng)
    path = write_tomogram(tmp_path / "sampleA" / "tomo", values, kind)
    item = TomogramDataset([FileData(tomo_path=path)])[0]
    assert item.data.dtype == torch.float32 and item.data.shape == (1, *SHAPE)
    np.testing.assert_array_equal(item.data[0].numpy(), written(values, kind))
    assert item.label.dtype == torch.float32 and item.label.shape == SHAPE and not item.label.any()
    assert (item.sample, item.tomo_name, item.split_id) == ("sampleA", path.name, None)
    # the input, a numpy array as the pipeline's datasets give it, of the memory of data
    source = item.aux_data["data"]
    assert list(item.aux_data) == ["data"] and isinstance(source, np.ndarray)
    assert source.shape == SHAPE and source.dtype == np.float32
    assert np.shares_memory(source, item.data.numpy())
    np.testing.assert_array_equal(source, written(values, kind))


def test_sample_and_split_ids_come_from_the_files_and_the_dataset(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    paths = [write_tomogram(tmp_path / f"t{i}", random_volume(rng), "mrc") for i in range(2)]
    files = [FileData(tomo_path=paths[0], sample="Q18"), FileData(tomo_path=paths[1])]
    dataset = TomogramDataset(files, split_ids=[3, None])
    assert (dataset[0].sample, dataset[0].split_id) == ("Q18", 3)
    assert (dataset[1].sample, dataset[1].split_id) == (tmp_path.name, None)
    assert len(dataset) == 2 and dataset[-1].tomo_name == "t1.mrc"


def test_hdf5_tomogram_under_another_key(tmp_path: Path, rng: np.random.Generator) -> None:
    values = random_volume(rng)
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as file:
        file["volume"] = values
        file["data"] = np.zeros(SHAPE, np.float32)
    item = TomogramDataset([FileData(tomo_path=path)], data_key="volume")[0]
    np.testing.assert_array_equal(item.data[0].numpy(), values)


# labels


def test_hdf5_labels_by_name(tmp_path: Path, rng: np.random.Generator) -> None:
    values = random_volume(rng)
    mito, granule = rng.random(SHAPE) > 0.5, (rng.random(SHAPE) > 0.7).astype(np.uint8)
    inside = tmp_path / "inside.hdf5"
    with h5py.File(inside, "w") as file:
        file["data"] = values
        file["labels/mito"] = mito
        file.create_dataset("labels/granule", data=granule, chunks=(3, 5, 6), compression="gzip")
    tomogram = write_tomogram(tmp_path / "apart", values, "mrc")
    # FileData.labels does not apply to HDF5 label files: the file's labels are its datasets
    files = [FileData(inside, inside), FileData(tomogram, inside, labels=["unrelated"])]
    for name, expected in (("mito", mito), ("granule", granule != 0)):
        dataset = TomogramDataset(files, label=name)
        for i in range(2):
            np.testing.assert_array_equal(dataset[i].label.numpy(), expected)
            np.testing.assert_array_equal(dataset[i].data[0].numpy(), values)


@pytest.mark.parametrize("kind", ["mrc", "tiff"])
def test_label_volume_values_by_name(tmp_path: Path, rng: np.random.Generator, kind: str) -> None:
    values = random_volume(rng)
    classes = rng.integers(0, 3, SHAPE).astype(np.int8)
    tomogram = write_tomogram(tmp_path / "tomo", values, "mrc")
    labels = write_tomogram(tmp_path / "labels", classes, kind)
    file = FileData(tomogram, labels, labels=["mito", "granule"])
    for value, name in enumerate(["mito", "granule"], start=1):
        item = TomogramDataset([file], label=name)[0]
        np.testing.assert_array_equal(item.label.numpy(), classes == value)
    assert 0 < (classes == 1).sum() < classes.size


# crops


@pytest.mark.parametrize("kind", KINDS)
def test_box_is_the_numpy_slice(tmp_path: Path, rng: np.random.Generator, kind: str) -> None:
    values = random_volume(rng)
    classes = rng.integers(0, 2, SHAPE).astype(np.uint8)
    path = write_tomogram(tmp_path / "tomo", values, kind)
    labels = write_tomogram(tmp_path / "labels", classes, "mrc")
    dataset = TomogramDataset([FileData(path, labels, labels=["mito"])], label="mito")
    expected = written(values, kind)
    for origin, shape in [((0, 0, 0), (2, 3, 4)), ((1, 2, 3), (5, 8, 9)), ((5, 9, 11), (1, 1, 1))]:
        item = dataset.read(0, list(origin), list(shape))  # type: ignore[arg-type]
        box = tuple(slice(o, o + n) for o, n in zip(origin, shape))
        np.testing.assert_array_equal(item.data[0].numpy(), expected[box])
        np.testing.assert_array_equal(item.label.numpy(), classes[box] == 1)
    rest = dataset.read(0, (2, 3, 4))
    np.testing.assert_array_equal(rest.data[0].numpy(), expected[2:, 3:, 4:])


@pytest.mark.parametrize("kind", ["mrc", "mrc-sections", "hdf5-chunked"])
def test_random_crops_are_the_slices_at_their_origin(
    tmp_path: Path, rng: np.random.Generator, kind: str
) -> None:
    values = random_volume(rng)
    mito = rng.random(SHAPE) > 0.5
    path = write_tomogram(tmp_path / "tomo", values, kind)
    labels = tmp_path / "labels.h5"
    with h5py.File(labels, "w") as file:
        file["labels/mito"] = mito
    dataset = TomogramDataset([FileData(path, labels)], label="mito", crop=(3, 5), seed=0)
    origins = set()
    for _ in range(20):
        item = dataset[0]
        z, y, x = item.aux_data["crop_origin"]
        origins.add((z, y, x))
        np.testing.assert_array_equal(item.data[0].numpy(), values[z : z + 3, y : y + 5, x : x + 5])
        np.testing.assert_array_equal(item.label.numpy(), mito[z : z + 3, y : y + 5, x : x + 5])
    assert len(origins) > 5


def test_crops_are_clipped_to_the_tomogram_and_repeat_with_the_seed(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    path = write_tomogram(tmp_path / "tomo", random_volume(rng), "mrc")
    item = TomogramDataset([FileData(path)], crop=(100, 11))[0]
    assert item.data.shape == (1, SHAPE[0], 10, 11) and item.aux_data["crop_origin"][:2] == (0, 0)
    first, second = (TomogramDataset([FileData(path)], crop=(2, 3), seed=5) for _ in range(2))
    assert [first[0].aux_data["crop_origin"] for _ in range(5)] == [
        second[0].aux_data["crop_origin"] for _ in range(5)
    ]


def sparse_file(tmp_path: Path, kind: str) -> Path:
    """A 1 GiB tomogram (256x1024x1024 float32) with one voxel written, sparse on disk or in chunks."""
    shape, where = (256, 1024, 1024), (100, 500, 600)
    if kind == "mrc":
        path = tmp_path / "huge.mrc"
        mrc = mrcfile.new_mmap(path, shape=shape, mrc_mode=2, fill=None)
        mrc.data[where] = 7
        mrc.close()
        return path
    path = tmp_path / "huge.h5"
    with h5py.File(path, "w") as file:
        chunks = (16, 64, 64) if kind == "hdf5-chunked" else None
        file.create_dataset("data", shape=shape, dtype=np.float32, chunks=chunks)[where] = 7
    return path


@pytest.mark.parametrize("kind", ["mrc", "hdf5", "hdf5-chunked"])
def test_a_crop_reads_only_the_crop(tmp_path: Path, kind: str) -> None:
    dataset = TomogramDataset([FileData(sparse_file(tmp_path, kind))], crop=(8, 32), seed=0)
    assert dataset.tomogram_shape(0) == (256, 1024, 1024)
    tracemalloc.start()
    try:
        item = dataset.read(0, (96, 490, 590), (8, 32, 32))
        for _ in range(3):
            assert dataset[0].data.shape == (1, 8, 32, 32)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"reading 32 KiB crops allocated {peak} bytes"
    assert item.data[0, 4, 10, 10] == 7 and item.data.sum() == 7


# batches


def test_collate_pads_and_fills_the_batch() -> None:
    tomograms = [
        make_tomogram("WT", "a.mrc", 4, split_id=0),
        make_tomogram("Q18", "b.mrc", 2, split_id=1),
        make_tomogram("WT", "a.mrc", 3, split_id=0),
        make_tomogram("WT", "c.mrc", 1, split_id=2),
    ]
    tomograms[1].aux_data = {"voxel_size": 1.5}
    tomograms[3].aux_data = {"voxel_size": 2.0, "note": "x"}
    batch = collate_tomograms(tomograms)
    assert isinstance(batch, BatchedTomogramData) and batch.batch_size == torch.Size([4])
    assert batch.tomo_batch.shape == (4, 4, 1, 4, 5) and batch.labels.shape == (4, 4, 4, 5)
    assert batch.labels.dtype == torch.float32
    assert batch.tomo_sizes.tolist() == [4, 2, 3, 1] and batch.min_slices == 1
    assert batch.tomo_sizes.dtype == torch.int32
    for i, tomogram in enumerate(tomograms):
        n = tomogram.data.shape[1]
        assert torch.equal(batch.tomo_batch[i, :n], tomogram.data.transpose(0, 1))
        assert torch.equal(batch.labels[i, :n], tomogram.label.float())
        assert (batch.tomo_batch[i, n:] == 0).all() and (batch.labels[i, n:] == LABEL_PADDING).all()
        # the input of each tomogram, unpadded, a numpy array of the memory of the tomogram's data
        source = batch.aux_data["data"][i]
        assert isinstance(source, np.ndarray) and np.shares_memory(source, tomogram.data.numpy())
        np.testing.assert_array_equal(source, tomogram.data[0].numpy())
    metadata = batch.metadata
    assert metadata.identifiers == (["WT", "Q18", "WT", "WT"], ["a.mrc", "b.mrc", "a.mrc", "c.mrc"])
    assert metadata.samples == ["WT", "Q18"] and metadata.tomo_names == ["a.mrc", "b.mrc", "c.mrc"]
    assert metadata.unique_id.tolist() == [[0, 0], [1, 1], [0, 0], [0, 2]]
    assert metadata.split_id.tolist() == [0, 1, 0, 2]
    assert {k: v for k, v in batch.aux_data.items() if k != "data"} == {
        "voxel_size": [None, 1.5, None, 2.0],
        "note": [None, None, None, "x"],
    }


def test_collate_without_split_ids_or_aux_data() -> None:
    batch = collate_tomograms([make_tomogram(split_id=1), make_tomogram(name="u.mrc", split_id=None)])
    assert batch.metadata.split_id is None and list(batch.aux_data) == ["data"]
    assert batch.min_slices == 3 and batch.num_slices == 3


def test_collate_batches_depth_first_tomograms_as_channel_first_ones() -> None:
    """The DINO feature path's ``[D, C, H, W]`` data and ``[1, D, H, W]`` labels, beside channel-first
    items, of different depths: the same ``[B, D, C, H, W]`` batch."""
    channel_first = [make_tomogram("WT", f"{d}.mrc", d, hw=(32, 48)) for d in (4, 2, 3)]
    for tomogram in channel_first:
        tomogram.data = torch.randn(5, *tomogram.label.shape)  # 5 channels: no depth is 5
    depth_first = [
        TomogramData(
            sample=t.sample,
            tomo_name=t.tomo_name,
            split_id=None,
            data=t.data.transpose(0, 1).contiguous(),
            label=t.label[None],
            batch_size=[],
        )
        for t in channel_first
    ]
    assert all(t.depth_first for t in depth_first) and not any(t.depth_first for t in channel_first)
    expected = collate_tomograms(channel_first)
    assert expected.tomo_batch.shape == (3, 4, 5, 32, 48)
    for tomograms in (depth_first, [depth_first[0], channel_first[1], depth_first[2]]):
        batch = collate_tomograms(tomograms)
        assert torch.equal(batch.tomo_batch, expected.tomo_batch)
        assert torch.equal(batch.labels, expected.labels) and batch.labels.dtype == torch.float32
        assert batch.tomo_sizes.tolist() == [4, 2, 3] and batch.min_slices == 2
        for source, tomogram in zip(batch.aux_data["data"], channel_first):
            assert isinstance(source, np.ndarray) and source.shape == (5, *tomogram.label.shape)
            np.testing.assert_array_equal(source, tomogram.data.numpy())  # [C, D, H, W] either way


def test_collate_of_features_and_their_full_resolution_labels() -> None:
    """Precomputed features ``[D, 1536, h, w]`` with labels ``[D, H, W]``, the inputs given as numpy."""
    rng = np.random.default_rng(3)
    tomograms = [
        TomogramData(
            sample="Q18",
            tomo_name=f"t{d}.hdf",
            split_id=None,
            data=rng.standard_normal((d, 1536, 2, 3)).astype(np.float16),
            label=(rng.random((d, 32, 48)) > 0.5).astype(np.float32),
            aux_data={"data": rng.random((d, 32, 48), np.float32)},
            batch_size=[],
        )
        for d in (3, 5)
    ]
    batch = collate_tomograms(tomograms)
    assert batch.tomo_batch.shape == (2, 5, 1536, 2, 3) and batch.tomo_batch.dtype == torch.float16
    assert batch.labels.shape == (2, 5, 32, 48)
    assert batch.flat_tomo_batch.shape == (10, 1536, 2, 3)
    for i, tomogram in enumerate(tomograms):
        n = tomogram.label.shape[0]
        assert torch.equal(batch.tomo_batch[i, :n], tomogram.data) and (batch.tomo_batch[i, n:] == 0).all()
        assert torch.equal(batch.labels[i, :n], tomogram.label)
        assert (batch.labels[i, n:] == LABEL_PADDING).all()
        assert batch.aux_data["data"][i] is tomogram.aux_data["data"]  # the array given, as given


def test_collate_rejects_tomograms_whose_channels_differ_across_layouts() -> None:
    first = make_tomogram("WT", "a.mrc", 3)
    other = TomogramData(
        sample="Q18",
        tomo_name="b.mrc",
        split_id=None,
        data=torch.randn(3, 2, 4, 5),
        label=torch.zeros(1, 3, 4, 5),
        batch_size=[],
    )
    with pytest.raises(
        ValueError, match=r"WT/a\.mrc has data of shape \(1, 3, 4, 5\).*Q18/b\.mrc has \(3, 2,"
    ):
        collate_tomograms([first, other])


def test_collate_rejects_an_empty_list() -> None:
    with pytest.raises(ValueError, match="no tomograms"):
        collate_tomograms([])


@pytest.mark.parametrize("hw", [(6, 5), (4, 7)])
def test_collate_rejects_different_heights_or_widths(hw: tuple[int, int]) -> None:
    tomograms = [make_tomogram("WT", "a.mrc"), make_tomogram("Q18", "b.mrc", hw=hw)]
    with pytest.raises(ValueError, match=r"height and width.*WT/a\.mrc.*\(1, 3, 4, 5\).*Q18/b\.mrc.*\(1, 3,"):
        collate_tomograms(tomograms)


def tomograms_of_depths(
    tmp_path: Path, rng: np.random.Generator, depths: list[int]
) -> tuple[list[FileData], list]:
    files, volumes = [], []
    for i, depth in enumerate(depths):
        values = random_volume(rng, (depth, *SHAPE[1:]))
        mito = rng.random(values.shape) > 0.5
        path = tmp_path / f"t{i}.h5"
        with h5py.File(path, "w") as file:
            file["data"] = values
            file["labels/mito"] = mito
        files.append(FileData(path, path))
        volumes.append((values, mito))
    return files, volumes


def test_getitems_reads_into_the_padded_batch(tmp_path: Path, rng: np.random.Generator) -> None:
    files, volumes = tomograms_of_depths(tmp_path, rng, [4, 6, 2])
    dataset = TomogramDataset(files, label="mito")
    items = dataset.__getitems__([0, 1, 2])
    batch = collate_tomograms(items)
    assert batch.tomo_batch.data_ptr() == items[0].data.data_ptr()  # no copy
    copied = collate_tomograms(list(items))
    assert copied.tomo_batch.data_ptr() != batch.tomo_batch.data_ptr()
    assert torch.equal(batch.tomo_batch, copied.tomo_batch) and torch.equal(batch.labels, copied.labels)
    for i, (values, mito) in enumerate(volumes):
        n = len(values)
        np.testing.assert_array_equal(batch.tomo_batch[i, :n, 0].numpy(), values)
        np.testing.assert_array_equal(batch.labels[i, :n].numpy(), mito.astype(np.int8))
        assert (batch.tomo_batch[i, n:] == 0).all() and (batch.labels[i, n:] == LABEL_PADDING).all()
    assert batch.tomo_sizes.tolist() == [4, 6, 2]


@pytest.mark.parametrize("crop", [None, (4, 8)])
def test_a_batch_of_volumes_and_sections_is_one_patch_read_per_kind(
    tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, crop: tuple[int, int] | None
) -> None:
    kinds, depths = ["mrc", "mrc-sections", "tiff", "hdf5-chunked", "mrc"], [6, 3, 5, 6, 2]
    files, volumes = [], []
    for i, (kind, depth) in enumerate(zip(kinds, depths)):
        values, mito = random_volume(rng, (depth, 10, 12)), rng.random((depth, 10, 12)) > 0.5
        tomogram = write_tomogram(tmp_path / f"t{i}", values, kind)
        labels = write_tomogram(tmp_path / f"l{i}", mito.astype(np.uint8), "mrc-sections" if i % 2 else "mrc")
        files.append(FileData(tomogram, labels, labels=["mito"]))
        volumes.append((values, mito))
    calls = []
    read = vio.read_patches_indexed_async

    def counting(loader, out, images, image_ids, centres, fill=None, keep=None):  # noqa: ANN001, ANN202
        calls.append(len(image_ids))
        return read(loader, out, images, image_ids, centres, fill, keep)

    monkeypatch.setattr(vio, "read_patches_indexed_async", counting)
    dataset = TomogramDataset(files, label="mito", crop=crop, seed=1)
    batch = collate_tomograms(dataset.__getitems__(range(5)))
    assert len(calls) == 4  # tomograms and labels, each a call for volumes and one for sections
    origins = batch.aux_data["crop_origin"] if crop else [(0, 0, 0)] * 5
    for i, ((values, mito), (z, y, x)) in enumerate(zip(volumes, origins)):
        n = batch.tomo_sizes[i]
        box = (slice(z, z + n), slice(y, y + (crop or (0, 10))[1]), slice(x, x + (crop or (0, 12))[1]))
        np.testing.assert_array_equal(batch.tomo_batch[i, :n, 0].numpy(), values[box])
        np.testing.assert_array_equal(batch.labels[i, :n].numpy(), mito[box].astype(np.int8))
        assert (batch.tomo_batch[i, n:] == 0).all() and (batch.labels[i, n:] == LABEL_PADDING).all()
    assert batch.tomo_sizes.tolist() == ([4, 3, 4, 4, 2] if crop else depths)


def test_a_changed_list_of_getitems_is_copied(tmp_path: Path, rng: np.random.Generator) -> None:
    files, volumes = tomograms_of_depths(tmp_path, rng, [4, 6])
    dataset = TomogramDataset(files, label="mito")
    items = dataset.__getitems__([0, 1])
    items.reverse()
    batch = collate_tomograms(items)
    np.testing.assert_array_equal(batch.tomo_batch[0, :6, 0].numpy(), volumes[1][0])
    assert batch.tomo_sizes.tolist() == [6, 4]
    items = dataset.__getitems__([0, 1])
    items[0].data = items[0].data.clone() + 1
    batch = collate_tomograms(items)
    np.testing.assert_array_equal(batch.tomo_batch[0, :4, 0].numpy(), volumes[0][0] + 1)


def test_dataloader_makes_batches_of_crops(tmp_path: Path, rng: np.random.Generator) -> None:
    files, _ = tomograms_of_depths(tmp_path, rng, [4, 6, 2])
    dataset = TomogramDataset(files, label="mito", crop=(3, 8), split_ids=[0, 1, 2], seed=3)
    batches = list(DataLoader(dataset, batch_size=2, collate_fn=collate_tomograms))
    assert [b.num_tomos for b in batches] == [2, 1]
    assert batches[0].tomo_batch.shape == (2, 3, 1, 8, 8) and batches[0].tomo_sizes.tolist() == [3, 3]
    assert batches[1].tomo_sizes.tolist() == [2] and batches[1].metadata.split_id.tolist() == [2]
    assert len(batches[0].aux_data["crop_origin"]) == 2


# results and predictions


def make_batch() -> BatchedTomogramData:
    tomograms = [make_tomogram("WT", "a.mrc", 4, split_id=0), make_tomogram("Q18", "b.hdf5", 2, split_id=1)]
    tomograms[0].aux_data = {"voxel_size": 1.5}
    return collate_tomograms(tomograms)


@pytest.mark.parametrize("channel", [False, True])
def test_model_result_removes_the_padding(channel: bool) -> None:
    batch = make_batch()
    preds = torch.rand(2, 4, 4, 5)
    result = model_result(
        batch, preds[:, :, None] if channel else preds, losses={"bce": 0.5}, metrics={"dice": 0.25}
    )
    assert isinstance(result, BatchedModelResult) and result.num_tomos == 2
    assert (result.samples, result.tomo_names, result.split_id) == (
        ["WT", "Q18"],
        ["a.mrc", "b.hdf5"],
        [0, 1],
    )
    assert (result.losses, result.metrics) == ({"bce": 0.5}, {"dice": 0.25})
    assert result.aux_data["voxel_size"] == [1.5, None]
    for i, n in enumerate([4, 2]):
        assert result.preds[i].dtype == np.float32 and result.preds[i].shape == (n, 4, 5)
        np.testing.assert_array_equal(result.preds[i], preds[i, :n].numpy())
        np.testing.assert_array_equal(result.data[i], batch.tomo_batch[i, :n, 0].numpy())
        assert result.data[i].dtype == np.float32 and result.data[i].shape == (n, 4, 5)
        assert result.label[i].dtype == np.int8
        np.testing.assert_array_equal(result.label[i], batch.labels[i, :n].numpy())
        assert set(np.unique(result.label[i])) <= {0, 1}


def test_model_result_keeps_labels_that_are_not_annotated_and_reads_data_from_the_batch() -> None:
    batch = make_batch()
    batch.labels[0, 1] = LABEL_PADDING
    batch.aux_data = None  # a batch the pipeline made without inputs: the data comes from tomo_batch
    result = model_result(batch, torch.rand(2, 4, 4, 5))
    assert (result.label[0][1] == -1).all() and set(np.unique(result.label[0])) == {-1, 0, 1}
    np.testing.assert_array_equal(result.data[1], batch.tomo_batch[1, :2, 0].numpy())


def test_model_result_rejects_predictions_of_another_shape() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3, 4, 5\)"):
        model_result(make_batch(), torch.rand(2, 3, 4, 5))


@pytest.mark.parametrize("file_format", ["mrc", "hdf5"])
def test_predictions_are_written_named_after_their_tomograms(tmp_path: Path, file_format: str) -> None:
    batch = make_batch()
    result = model_result(batch, torch.rand(2, 4, 4, 5))
    paths = write_predictions(result, tmp_path / "out", file_format)
    assert paths == [
        tmp_path / "out" / "WT" / f"a.{file_format}",
        tmp_path / "out" / "Q18" / f"b.{file_format}",
    ]
    for path, preds, data in zip(paths, result.preds, result.data):
        if file_format == "mrc":
            with mrcfile.open(path) as mrc:
                np.testing.assert_array_equal(mrc.data, preds)
        else:
            with h5py.File(path, "r") as file:
                np.testing.assert_array_equal(file["preds"][()], preds)
                np.testing.assert_array_equal(file["data"][()], data)
    if file_format == "hdf5":  # a written file is a tomogram in turn
        np.testing.assert_array_equal(
            TomogramDataset([FileData(paths[1])])[0].data[0].numpy(), result.data[1]
        )


def test_write_predictions_rejects_other_formats(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tif"):
        write_predictions(model_result(make_batch(), torch.rand(2, 4, 4, 5)), tmp_path, "tif")  # type: ignore[arg-type]


# bad input


def test_tomogram_and_label_of_different_shapes(tmp_path: Path, rng: np.random.Generator) -> None:
    tomogram = write_tomogram(tmp_path / "tomo", random_volume(rng), "mrc")
    labels = write_tomogram(tmp_path / "labels", np.zeros((6, 10, 11), np.int8), "mrc")
    dataset = TomogramDataset([FileData(tomogram, labels, labels=["mito"])], label="mito")
    with pytest.raises(ValueError, match=r"has shape \(6, 10, 12\), its label volume") as error:
        dataset[0]
    assert str(tomogram) in str(error.value) and str(labels) in str(error.value)


def test_missing_hdf5_label_lists_those_there_are(tmp_path: Path, rng: np.random.Generator) -> None:
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as file:
        file["data"] = random_volume(rng)
        file["labels/mito"] = np.zeros(SHAPE, bool)
        file["labels/granule"] = np.zeros(SHAPE, bool)
    with pytest.raises(KeyError, match=r"'ribosome'.*\['granule', 'mito'\]"):
        TomogramDataset([FileData(path, path)], label="ribosome")[0]


def test_missing_label_of_a_label_volume_lists_those_there_are(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    tomogram = write_tomogram(tmp_path / "tomo", random_volume(rng), "mrc")
    labels = write_tomogram(tmp_path / "labels", np.zeros(SHAPE, np.int8), "mrc")
    with pytest.raises(KeyError, match=r"'ribosome'.*\['mito', 'granule'\]"):
        TomogramDataset([FileData(tomogram, labels, labels=["mito", "granule"])], label="ribosome")[0]
    with pytest.raises(KeyError, match="no label file"):
        TomogramDataset([FileData(tomogram)], label="mito")[0]


def test_bad_arguments_and_boxes(tmp_path: Path, rng: np.random.Generator) -> None:
    path = write_tomogram(tmp_path / "tomo", random_volume(rng), "mrc")
    with pytest.raises(ValueError, match="crop"):
        TomogramDataset([FileData(path)], crop=(0, 4))
    with pytest.raises(ValueError, match="split_ids"):
        TomogramDataset([FileData(path)], split_ids=[0, 1])
    dataset = TomogramDataset([FileData(path)])
    with pytest.raises(ValueError, match="not inside"):
        dataset.read(0, (5, 0, 0), (2, 1, 1))
    with pytest.raises(IndexError, match="tomogram 1 of a dataset of 1"):
        dataset[1]
    image = tmp_path / "image.mrc"
    with mrcfile.new(image) as mrc:
        mrc.set_data(np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="not a volume"):
        TomogramDataset([FileData(image)])[0]
    with pytest.raises(FileNotFoundError, match="missing.mrc: no such file"):
        TomogramDataset([FileData(tmp_path / "missing.mrc")])[0]


def test_close_then_read_again(tmp_path: Path, rng: np.random.Generator) -> None:
    values = random_volume(rng)
    path = write_tomogram(tmp_path / "tomo", values, "hdf5")
    dataset = TomogramDataset([FileData(path)], crop=(2, 3))
    dataset[0]
    dataset.close()
    np.testing.assert_array_equal(dataset.read(0).data[0].numpy(), values)


def test_dataloader_workers_draw_different_crops(tmp_path: Path, rng: np.random.Generator) -> None:
    path = write_tomogram(tmp_path / "tomo", random_volume(rng, (20, 30, 30)), "hdf5")
    dataset = TomogramDataset([FileData(path)] * 4, crop=(2, 3), seed=0)
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=collate_tomograms)
    origins = [tuple(origin) for batch in loader for origin in batch.aux_data["crop_origin"]]
    assert len(origins) == 4 and len(set(origins)) == 4


def test_an_input_or_label_volume_that_does_not_cover_the_tomogram(tmp_path: Path) -> None:
    path = tmp_path / "t.hdf5"
    with h5py.File(path, "w") as file:
        file["data"] = np.zeros((4, 32, 32), np.uint8)
        file["features"] = np.zeros((8, 4, 2, 2), np.float16)
        file["labels/mito"] = np.zeros((4, 32, 30), np.int8)  # not 16 times the features' width
        file["labels/other"] = np.zeros((3, 32, 32), np.int8)  # not their depth
    with pytest.raises(ValueError, match=r"t\.hdf5 has shape \(4, 2, 2\).*label volume.*\(4, 32, 30\)"):
        TomogramDataset([FileData(path, path)], label="mito", data_key="features")[0]
    with pytest.raises(ValueError, match=r"label volume.*\(3, 32, 32\)"):
        TomogramDataset([FileData(path, path)], label="other", data_key="features")[0]
    with pytest.raises(ValueError, match=r"input volume.*\(3, 32, 32\)"):
        TomogramDataset([FileData(path)], input_key="labels/other")[0]
    with pytest.raises(ValueError, match=r"t\.hdf5: holds .*\(8, 4, 2, 2\).*not a volume"):
        TomogramDataset([FileData(path)], input_key="features")[0]
    item = TomogramDataset([FileData(path)], data_key="features", input_key="data")[0]
    assert item.data.shape == (8, 4, 2, 2) and item.aux_data["data"].shape == (4, 32, 32)
    assert isinstance(item.aux_data["data"], np.ndarray)
