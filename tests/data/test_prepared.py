"""PreparedSource: the first epoch reads and prepares, later ones neither read nor compute, nothing stale."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import mrcfile
import numpy as np
import pytest

import vitrio as vio
from vitrio.data import (
    ArraySource,
    Compose,
    DataLoader,
    Dataset,
    FourierCrop,
    ImageSource,
    Invert,
    Normalize,
    PreparedSource,
)


class Counted:
    """A source or a transform that counts the rows it is asked for, and passes them on."""

    def __init__(self, wrapped):
        self.wrapped, self.rows = wrapped, 0

    def __getattr__(self, name):
        return getattr(self.wrapped, name)

    def __len__(self):
        return len(self.wrapped)

    def read_async(self, loader, rows, out):
        self.rows += len(rows)
        return self.wrapped.read_async(loader, rows, out)

    def __call__(self, images):
        self.rows += len(images)
        return self.wrapped(images)


@pytest.fixture
def images() -> np.ndarray:
    return np.random.default_rng(2).normal(size=(10, 32, 32)).astype(np.float32)


def epoch(source: PreparedSource) -> np.ndarray:
    batches = DataLoader(Dataset({"image": source}), 4, shuffle=True, seed=1)
    return {int(i): image for batch in batches for i, image in zip(batch["index"], batch["image"])}


def test_later_epochs_neither_read_nor_compute(images: np.ndarray):
    source, steps = Counted(ArraySource(images)), Counted(Compose(FourierCrop(16), Normalize(6)))
    prepared = PreparedSource(source, steps, "float16")
    steps.rows = 0  # the probe of the shape
    expected = Compose(FourierCrop(16), Normalize(6))(images).astype(np.float16)
    for _ in range(3):
        served = epoch(prepared)
        np.testing.assert_array_equal(np.stack([served[i] for i in range(10)]), expected)
    assert (source.rows, steps.rows) == (10, 10)
    assert prepared.prepared_count == 10 and prepared.dtype == np.float16 and prepared.shape == (16, 16)


def test_a_changed_parameter_never_serves_the_images_of_the_old_one(images: np.ndarray):
    source = ArraySource(images)
    first = PreparedSource(source, Compose(FourierCrop(16)))
    epoch(first)
    changed = PreparedSource(source, Compose(FourierCrop(12)))
    assert changed.key != first.key and changed.prepared_count == 0
    served = epoch(changed)
    np.testing.assert_allclose(np.stack([served[i] for i in range(10)]), FourierCrop(12)(images), atol=1e-6)


def test_a_failed_transform_raises_at_its_batch_and_holds_nothing(images: np.ndarray):
    def refuse(batch):
        if len(batch) > 1:
            raise RuntimeError("refused")
        return batch

    prepared = PreparedSource(ArraySource(images), refuse)
    with pytest.raises(RuntimeError, match="refused"):
        list(DataLoader(Dataset({"image": prepared}), 4))
    assert prepared.prepared_count == 0


STEPS = Compose(FourierCrop(16), Normalize(6))

LATER_PROGRAM = """
import json, sys
import numpy as np
from vitrio import ImageLocation
from vitrio.data import Compose, DataLoader, Dataset, FourierCrop, ImageSource, Normalize, PreparedSource

images, apply = [], FourierCrop.apply
FourierCrop.apply = lambda self, batch: images.append(len(batch)) or apply(self, batch)
folder = sys.argv[1]
counts = {"a.mrcs": 6, "b.mrcs": 4}
locations = [ImageLocation(f"{folder}/{name}", i) for name, count in counts.items() for i in range(count)]
steps = Compose(FourierCrop(16), Normalize(6))
prepared = PreparedSource(ImageSource(locations), steps, "float16", scratch=f"{folder}/prepared.scratch")
images.clear()  # the probe of the shape
batches = DataLoader(Dataset({"image": prepared}), 4, shuffle=True, seed=1)
served = {int(i): image for batch in batches for i, image in zip(batch["index"], batch["image"])}
np.save(f"{folder}/served.npy", np.stack([served[i] for i in range(len(served))]))
reads = batches.stats.reads
print(json.dumps({"transformed": sum(images), "opened": reads.files_opened, "served": reads.scratch_images}))
"""


@pytest.fixture
def stacks(tmp_path, images: np.ndarray) -> list:
    vio.write_stack(images[:6], tmp_path / "a.mrcs")
    vio.write_stack(images[6:], tmp_path / "b.mrcs")
    return [
        vio.ImageLocation(tmp_path / name, i)
        for name, count in (("a.mrcs", 6), ("b.mrcs", 4))
        for i in range(count)
    ]


def afresh(folder, steps, data_type) -> np.ndarray:
    """The images as mrcfile reads them, through `steps`, in `data_type`."""
    stored = np.concatenate([mrcfile.read(folder / name) for name in ("a.mrcs", "b.mrcs")])
    return steps(stored).astype(ml_dtypes.bfloat16 if data_type == "bfloat16" else data_type)


@pytest.fixture
def transformed(monkeypatch) -> list:
    """How many images FourierCrop is applied to, call by call."""
    images, apply = [], FourierCrop.apply
    monkeypatch.setattr(
        FourierCrop, "apply", lambda self, batch: images.append(len(batch)) or apply(self, batch)
    )
    return images


def test_a_later_program_serves_the_scratch_file_reading_no_file_computing_nothing(
    tmp_path, stacks, transformed
):
    expected = afresh(tmp_path, STEPS, "float16")
    prepared = PreparedSource(ImageSource(stacks), STEPS, "float16", scratch=tmp_path / "prepared.scratch")
    transformed.clear()
    served = epoch(prepared)
    np.testing.assert_array_equal(np.stack([served[i] for i in range(10)]), expected)
    assert sum(transformed) == 10 and prepared.prepared_count == 10
    assert os.stat(tmp_path / "prepared.scratch").st_mode & 0o777 == 0o600

    later = subprocess.run(
        [sys.executable, "-c", LATER_PROGRAM, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert later.returncode == 0, later.stderr
    assert json.loads(later.stdout) == {"transformed": 0, "opened": 0, "served": 10}
    np.testing.assert_array_equal(np.load(tmp_path / "served.npy"), expected)


@pytest.mark.parametrize(
    ("steps", "data_type"),
    [
        (Compose(FourierCrop(16), Normalize(5)), "float16"),  # another parameter, the same shape
        (Compose(FourierCrop(12), Normalize(6)), "float16"),  # another shape
        (STEPS, "float32"),  # another type
        (Compose(FourierCrop(16), Normalize(6), Invert()), "float16"),  # another step
    ],
)
def test_a_scratch_file_made_otherwise_is_rebuilt(tmp_path, stacks, transformed, steps, data_type):
    path, expected = tmp_path / "prepared.scratch", afresh(tmp_path, steps, data_type)
    epoch(PreparedSource(ImageSource(stacks), STEPS, "float16", scratch=path))
    changed = PreparedSource(ImageSource(stacks), steps, data_type, scratch=path)
    assert changed.prepared_count == 0
    transformed.clear()
    served = epoch(changed)
    np.testing.assert_array_equal(np.stack([served[i] for i in range(10)]), expected)
    assert sum(transformed) == 10


def test_the_images_of_a_changed_file_are_prepared_again(tmp_path, stacks, images, transformed):
    path = tmp_path / "prepared.scratch"
    epoch(PreparedSource(ImageSource(stacks), STEPS, "float16", scratch=path))
    written = os.stat(tmp_path / "b.mrcs").st_mtime_ns
    os.unlink(tmp_path / "b.mrcs")
    vio.write_stack(images[6:] * 2 + 1, tmp_path / "b.mrcs")
    os.utime(tmp_path / "b.mrcs", ns=(written, written + 10**9))  # a later time even on a coarse clock
    expected = afresh(tmp_path, STEPS, "float16")
    again = PreparedSource(ImageSource(stacks), STEPS, "float16", scratch=path)
    assert again.prepared_count == 6
    transformed.clear()
    served = epoch(again)
    np.testing.assert_array_equal(np.stack([served[i] for i in range(10)]), expected)
    assert sum(transformed) == 4  # b's images alone


def test_a_subset_is_served_from_the_same_scratch_file(tmp_path, stacks):
    prepared = PreparedSource(ImageSource(stacks), STEPS, "bfloat16", scratch=tmp_path / "prepared.scratch")
    epoch(prepared)
    subset = prepared.subset(np.array([7, 2]))
    assert len(subset) == 2 and subset.prepared_count == 10 and subset.dtype.name == "bfloat16"
    values = Dataset({"image": subset})[0:2]["image"]
    np.testing.assert_array_equal(values, afresh(tmp_path, STEPS, "bfloat16")[[7, 2]])


def test_a_scratch_file_needs_files_and_a_transform_its_parameters_name(tmp_path, stacks, images):
    with pytest.raises(TypeError, match="ImageSource"):
        PreparedSource(ArraySource(images), STEPS, scratch=tmp_path / "prepared.scratch")
    with pytest.raises(TypeError, match="parameters name"):
        PreparedSource(ImageSource(stacks), lambda batch: batch, scratch=tmp_path / "prepared.scratch")
    with pytest.raises(ValueError, match="a.mrcs: a stack named whole"):
        PreparedSource(ImageSource([stacks[0].key]), STEPS, scratch=tmp_path / "prepared.scratch")


def test_whole_files_and_rows_of_several_images_are_prepared_image_by_image(tmp_path, stacks, images):
    for i in range(3):
        mrcfile.write(tmp_path / f"micrograph{i}.mrc", images[i])
    micrographs = ImageSource([tmp_path / f"micrograph{i}.mrc" for i in range(3)])
    steps = Compose(FourierCrop(16), Invert())
    whole = PreparedSource(micrographs, steps, scratch=tmp_path / "micrographs.scratch")
    np.testing.assert_array_equal(Dataset({"image": whole})[0:3]["image"], steps(images[:3]))
    pairs = ImageSource([[stacks[i], stacks[9 - i]] for i in range(5)])
    paired = PreparedSource(pairs, steps, "bfloat16", scratch=tmp_path / "pairs.scratch")
    expected = steps(np.stack([images[:5], images[9:4:-1]], axis=1)).astype(ml_dtypes.bfloat16)
    assert paired.shape == (2, 16, 16)
    np.testing.assert_array_equal(Dataset({"image": paired})[0:5]["image"], expected)


def test_a_symbolic_link_at_the_scratch_path_is_replaced_not_followed(tmp_path, stacks):
    victim = tmp_path / "victim"
    victim.write_bytes(b"not a scratch")
    (tmp_path / "prepared.scratch").symlink_to(victim)
    prepared = PreparedSource(ImageSource(stacks), STEPS, scratch=tmp_path / "prepared.scratch")
    epoch(prepared)
    assert victim.read_bytes() == b"not a scratch" and not (tmp_path / "prepared.scratch").is_symlink()
    assert prepared.prepared_count == 10
