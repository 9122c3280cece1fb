"""`vitrio.data` as the published package pins it: sources return lists, refuse what cannot be read."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio
from vitrio.data import ArraySource, Dataset, ImageSource, PatchSource


def test_sources_return_a_list_of_things_to_wait_on(tmp_path, rng):
    assert ArraySource(np.arange(5)).read_async(None, np.array([1, 2]), np.zeros(2, np.int64)) == []
    images = rng.normal(size=(3, 4, 4)).astype(np.float32)
    vio.write_stack(images, tmp_path / "s.mrcs")
    source = ImageSource([vio.ImageLocation(tmp_path / "s.mrcs", i) for i in range(3)])
    out = np.zeros((2, 4, 4), np.float32)
    pending = source.read_async(vio.loader(workers=1), np.array([2, 0]), out)
    assert isinstance(pending, list) and len(pending) == 1
    for waitable in pending:
        waitable.get()
    np.testing.assert_array_equal(out, images[[2, 0]])


class _ListSource:
    """A user's source written against the published protocol: it returns a list."""

    shape, dtype = (2,), np.dtype(np.float32)

    def __len__(self):
        return 3

    def read_async(self, loader, rows, out):
        out[...] = np.asarray(rows, np.float32)[:, None]
        return []

    def subset(self, rows):
        return self


class _CompletionSource(_ListSource):
    """One written against earlier versions of this package: it returns one completion."""

    def read_async(self, loader, rows, out):
        super().read_async(loader, rows, out)
        return vio.Completion()


@pytest.mark.parametrize("kind", [_ListSource, _CompletionSource])
def test_dataset_takes_either_kind_of_user_source(kind):
    batch = Dataset({"value": kind()})[[2, 0]]
    np.testing.assert_array_equal(batch["value"], [[2, 2], [0, 0]])


def test_an_index_into_a_single_image_is_refused_at_construction(tmp_path):
    vio.write_single(np.zeros((8, 8), np.float32), tmp_path / "single.mrc")
    location = vio.ImageLocation(tmp_path / "single.mrc", 0)
    with pytest.raises(ValueError, match="single.mrc"):
        ImageSource([location])
    with pytest.raises(ValueError, match="single.mrc"):
        ImageSource([location], check=False)
    with pytest.raises(ValueError, match="single.mrc"):
        PatchSource([location], [[4, 4]], (2, 2))


def test_preloading_a_column_is_refused(tmp_path):
    vio.write_stack(np.zeros((2, 3, 3), np.float32), tmp_path / "s.mrcs")
    images = ImageSource([vio.ImageLocation(tmp_path / "s.mrcs", i) for i in range(2)])
    dataset = Dataset({"image": images, "label": [0, 1]})
    with pytest.raises(ValueError, match="label"):
        dataset.preload(["label"])
    with pytest.raises(ValueError, match="label"):
        dataset.subset([1]).preload(["label"])
    assert isinstance(dataset.preload(["image"]).fields["image"], ArraySource)


def test_a_vanished_file_fails_a_batch_with_runtime_error(tmp_path):
    path = tmp_path / "s.mrcs"
    vio.write_stack(np.zeros((2, 3, 3), np.float32), path)
    dataset = Dataset({"image": ImageSource([vio.ImageLocation(path, i) for i in range(2)])})
    path.unlink()
    with pytest.raises(RuntimeError, match="s.mrcs"):
        dataset[[0, 1]]
