"""PreparedSource: the first epoch reads and prepares, later ones neither read nor compute, nothing stale."""

from __future__ import annotations

import numpy as np
import pytest

from vitrio.data import ArraySource, Compose, DataLoader, Dataset, FourierCrop, Normalize, PreparedSource


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
