"""Standardize against numpy's mean and standard deviation in float64, item by item: on numpy arrays,
tensors of PyTorch in host memory and on PyTorch's own operations, and through a DataLoader's threads."""

from __future__ import annotations

import mrcfile
import numpy as np
import pytest
import torch

import vitrio as vio
from vitrio import ImageLocation
from vitrio.data import ArraySource, Compose, DataLoader, Dataset, ImageSource, Invert, Standardize

# float32's rounding: half a unit in the last place of the result, at most 2^-24 of it
ROUNDING = 2.0**-24


def standardized(batch: np.ndarray) -> np.ndarray:
    """Each row of `batch` less its mean over its deviation, in float64, as numpy computes them."""
    values = np.asarray(batch, dtype=np.float64)
    axes = tuple(range(1, values.ndim))
    return (values - values.mean(axis=axes, keepdims=True)) / values.std(axis=axes, keepdims=True)


def batch_of(shape: tuple[int, ...], offset: float, scale: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (offset + scale * rng.standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize(
    "shape",
    [(6, 5), (4, 33, 47), (3, 20, 21, 22), (2, 3, 16, 16), (2, 3001)],
    ids=["values", "images", "volumes", "channels", "blocks"],
)
@pytest.mark.parametrize(("offset", "scale"), [(0, 1), (1e4, 1), (-3e6, 100), (0, 1e-30), (5, 1e30)])
def test_each_item_is_numpy_s_float64_standardisation_rounded_to_float32(shape, offset, scale):
    batch = batch_of(shape, offset, scale)
    result = Standardize()(batch)
    assert result.dtype == np.float32 and result.shape == shape
    np.testing.assert_allclose(result, standardized(batch), rtol=ROUNDING * (1 + 1e-6), atol=1e-12)


def test_an_item_far_from_0_keeps_its_precision_whatever_its_first_values():
    # the first values of each item lie thousands of deviations from its mean
    batch = batch_of((3, 5000), 1e4, 1)
    batch[:, :10] = [[1e4 + 5000], [1e4 - 3000], [2e4]]
    np.testing.assert_allclose(
        Standardize()(batch), standardized(batch), rtol=ROUNDING * (1 + 1e-6), atol=1e-12
    )


def test_a_flat_item_becomes_zeros_and_only_an_item_with_nan_or_infinity_becomes_nan():
    batch = batch_of((5, 8, 8), 1e4, 1)
    batch[0] = 3.3
    batch[1] = 1e4
    batch[2, 4, 4] = np.nan
    batch[3, 0, 0] = np.inf
    result = Standardize()(batch)
    assert np.array_equal(result[:2], np.zeros((2, 8, 8), np.float32))
    assert np.isnan(result[2:4]).all()
    with np.errstate(invalid="ignore"):  # numpy's own NaN of an infinite item
        assert np.isnan(standardized(batch[2:4])).all()
    np.testing.assert_allclose(result[4], standardized(batch[4:])[0], rtol=ROUNDING * (1 + 1e-6), atol=1e-12)


@pytest.mark.parametrize("dtype", ["int16", "uint8", "float16", "float64"])
def test_other_types_are_standardised_as_float32(dtype: str):
    batch = np.random.default_rng(1).integers(0, 200, (4, 9, 9)).astype(dtype)
    result = Standardize()(batch)
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, Standardize()(batch.astype(np.float32)))


def test_the_batch_given_is_left_as_it_was_and_a_view_is_standardised_as_a_copy():
    batch = batch_of((4, 10, 12), 7, 2)
    kept = batch.copy()
    view = batch.transpose(0, 2, 1)[::2]
    result = Standardize()(view)
    np.testing.assert_array_equal(batch, kept)
    np.testing.assert_array_equal(result, Standardize()(np.ascontiguousarray(view)))


def test_empty_batches_and_items_of_no_value_are_handed_back_and_a_single_value_is_refused():
    assert Standardize()(np.zeros((0, 4, 4), np.float32)).shape == (0, 4, 4)
    assert Standardize()(np.zeros((3, 0), np.int16)).shape == (3, 0)
    with pytest.raises(ValueError, match="a batch of items, each a row of its first axis"):
        Standardize()(np.float32(2))


def test_a_tensor_in_host_memory_is_standardised_as_its_numpy_values():
    batch = batch_of((3, 6, 7, 8), 1e4, 1)
    for tensor in (
        torch.from_numpy(batch),
        torch.from_numpy(batch).transpose(1, 3),
        torch.from_numpy(batch).half(),
    ):
        result = Standardize()(tensor)
        assert isinstance(result, torch.Tensor) and result.dtype == torch.float32
        np.testing.assert_array_equal(result.numpy(), Standardize()(tensor.float().numpy()))


def test_a_tensor_that_requires_grad_is_standardised_by_pytorch_s_operations():
    batch = batch_of((4, 12, 13), 1e4, 1)
    batch[0] = 1e4
    tensor = torch.from_numpy(batch).requires_grad_()
    result = Standardize()(tensor)
    assert result.requires_grad and result.dtype == torch.float32
    values = result.detach().numpy()
    assert np.array_equal(values[0], np.zeros((12, 13), np.float32))
    np.testing.assert_allclose(values[1:], standardized(batch[1:]), atol=1e-5)
    result.sum().backward()
    assert tensor.grad is not None and tensor.grad.shape == tensor.shape


def test_a_batch_s_image_field_is_standardised_and_its_other_fields_kept():
    images = batch_of((5, 16, 16), 100, 3)
    batch = {"image": images, "defocus": np.arange(5.0)}
    result = Standardize()(batch)
    np.testing.assert_array_equal(result["image"], Standardize()(images))
    assert result["defocus"] is batch["defocus"]
    with pytest.raises(KeyError, match="no field 'image'"):
        Standardize()({"volume": images})
    np.testing.assert_array_equal(Compose(Standardize(), Invert())(batch)["image"], -Standardize()(images))
    assert Standardize() == Standardize() and hash(Standardize()) == hash(Standardize())
    assert repr(Standardize()) == "Standardize()" and Standardize() != Invert()


@pytest.mark.parametrize("transform_threads", [True, False])
def test_a_data_loader_standardises_every_batch_read_from_files(tmp_path, transform_threads: bool):
    stack = np.random.default_rng(3).integers(-500, 500, (40, 24, 24)).astype(np.int16)
    stack[7] = 12  # a flat image
    path = tmp_path / "stack.mrcs"
    with mrcfile.new(path) as mrc:
        mrc.set_data(stack)
    dataset = Dataset({"image": ImageSource([ImageLocation(str(path), i) for i in range(len(stack))])})
    batches = DataLoader(
        dataset,
        8,
        shuffle=True,
        seed=1,
        loader=vio.loader(workers=2),
        transform=Standardize(),
        transform_threads=transform_threads,
    )
    seen = []
    for batch in batches:
        assert batch["image"].dtype == np.float32
        with np.errstate(invalid="ignore"):  # numpy's 0 / 0 of the flat image, which Standardize makes 0
            expected = np.nan_to_num(standardized(stack[batch["index"]]))
        np.testing.assert_allclose(batch["image"], expected, rtol=ROUNDING * (1 + 1e-6), atol=1e-12)
        seen.extend(batch["index"])
    assert sorted(seen) == list(range(len(stack)))


def test_a_data_loader_hands_tensors_standardised():
    images = batch_of((12, 10, 10), -40, 5)
    batches = DataLoader(Dataset({"image": ArraySource(images)}), 4, output="torch", transform=Standardize())
    for first, batch in zip(range(0, 12, 4), batches):
        assert isinstance(batch["image"], torch.Tensor)
        np.testing.assert_array_equal(batch["image"].numpy(), Standardize()(images[first : first + 4]))
