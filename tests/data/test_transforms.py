"""FourierCrop, Normalize, Invert and Compose against computations written plainly, one image at a time."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import ml_dtypes
import mrcfile
import numpy as np
import pytest
import torch

from vitrio import ImageLocation
from vitrio.data import ArraySource, Compose, DataLoader, Dataset, FourierCrop, ImageSource, Invert, Normalize


def cryodrgn_downsample(image: np.ndarray, size: int) -> np.ndarray:
    """cryoDRGN's downsample of one image, as its fft.py writes it: centred Hartley transforms."""

    def centred(values: np.ndarray) -> np.ndarray:
        return np.fft.fftshift(np.fft.fft2(np.fft.fftshift(values)))

    spectrum = centred(image.astype(np.float64))
    hartley = spectrum.real - spectrum.imag
    start = int(image.shape[0] / 2 - size / 2)
    back = centred(hartley[start : start + size, start : start + size]) / (size * size)
    return back.real - back.imag


def fourier_crop(image: np.ndarray, size: int) -> np.ndarray:
    """The odd-sized Fourier crop of one image, centres at n // 2: its spectrum cropped symmetrically."""
    n = image.shape[0]
    spectrum = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(image.astype(np.float64))))
    start = n // 2 - size // 2
    cropped = spectrum[start : start + size, start : start + size]
    return np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(cropped))).real


def normalized(image: np.ndarray, radius: float) -> np.ndarray:
    """RELION's normalisation of one image: mean and population deviation of the pixels beyond `radius`."""
    n = image.shape[0]
    background = [
        image[y, x] for y in range(n) for x in range(n) if (y - n // 2) ** 2 + (x - n // 2) ** 2 > radius**2
    ]
    return (image - np.mean(background)) / np.std(background)


@pytest.fixture
def stack() -> np.ndarray:
    return np.random.default_rng(5).normal(3.0, 2.0, size=(6, 48, 48)).astype(np.float32)


@pytest.mark.parametrize(("n", "size"), [(48, 24), (48, 20), (46, 24), (48, 48)])
def test_even_crops_are_cryodrgn_downsample(stack: np.ndarray, n: int, size: int):
    images = stack[:, :n, :n]
    expected = np.stack([cryodrgn_downsample(image, size) for image in images])
    got = FourierCrop(size)(images)
    assert got.dtype == np.float32 and got.shape == (6, size, size)
    np.testing.assert_allclose(got, expected, atol=2e-5 * np.abs(expected).max())


CRYODRGN_DOWNSAMPLE = """
import argparse, sys
from cryodrgn.commands import downsample

parser = argparse.ArgumentParser()
downsample.add_args(parser)
stack, *sizes = sys.argv[1:]
for size in sizes:
    downsample.main(parser.parse_args([stack, "-D", size, "-o", f"{stack}.{size}.mrcs"]))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("cryodrgn") is None,
    reason="cryoDRGN is not installed (pip install --no-deps cryodrgn==4.3.0 igraph texttable)",
)
def test_even_crops_are_what_cryodrgn_downsample_writes(stack: np.ndarray, tmp_path):
    """cryoDRGN's own `downsample` command, run in a program of its own (its import sets up logging)."""
    path = tmp_path / "particles.mrcs"
    mrcfile.write(path, stack)
    sizes = (24, 20, 48)
    command = [sys.executable, "-c", CRYODRGN_DOWNSAMPLE, str(path), *map(str, sizes)]
    ran = subprocess.run(command, capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    images = ImageSource([ImageLocation(path, i) for i in range(len(stack))])
    read = Dataset({"image": images})[0 : len(stack)]["image"]
    for size in sizes:
        written = mrcfile.read(f"{path}.{size}.mrcs")
        got = FourierCrop(size)(read)
        assert written.shape == got.shape == (len(stack), size, size)
        np.testing.assert_allclose(
            got, written, rtol=0, atol=8 * np.finfo(np.float32).eps * np.abs(written).max()
        )


@pytest.mark.parametrize(("n", "size"), [(48, 25), (47, 23), (47, 47)])
def test_odd_crops_are_the_symmetric_fourier_crop(stack: np.ndarray, n: int, size: int):
    images = stack[:, :n, :n]
    expected = np.stack([fourier_crop(image, size) for image in images])
    np.testing.assert_allclose(FourierCrop(size)(images), expected, atol=2e-5 * np.abs(expected).max())


def test_a_crop_keeps_the_sum_and_a_crop_to_the_same_size_keeps_the_image(stack: np.ndarray):
    np.testing.assert_allclose(FourierCrop(24)(stack).sum(axis=(1, 2)), stack.sum(axis=(1, 2)), rtol=1e-4)
    np.testing.assert_allclose(FourierCrop(48)(stack), stack, atol=1e-5)


def test_a_single_image_is_transformed_as_a_batch_of_one(stack: np.ndarray):
    steps = Compose(FourierCrop(24), Normalize(8), Invert())
    np.testing.assert_allclose(steps(stack[2]), steps(stack)[2], atol=1e-5)


def test_normalize_is_relion_per_image(stack: np.ndarray):
    expected = np.stack([normalized(image, 17.5) for image in stack])
    np.testing.assert_allclose(Normalize(17.5)(stack), expected, atol=1e-5)
    np.testing.assert_array_equal(Invert()(stack), -stack)


def test_torch_batches_are_transformed_on_their_device_as_numpy_ones(stack: np.ndarray):
    steps = Compose(FourierCrop(31), Normalize(10), Invert())
    tensor = steps({"image": torch.from_numpy(stack), "defocus": torch.ones(6)})
    assert tensor["image"].dtype == torch.float32 and tensor["defocus"].dtype == torch.float32
    np.testing.assert_allclose(tensor["image"].numpy(), steps(stack), atol=1e-5)


@pytest.mark.parametrize(
    ("data_type", "numpy_type", "torch_type", "tolerance"),
    [("float16", np.float16, torch.float16, 1e-3), ("bfloat16", ml_dtypes.bfloat16, torch.bfloat16, 8e-3)],
)
def test_half_precision_stores_the_float32_result_rounded(
    stack: np.ndarray, data_type: str, numpy_type, torch_type, tolerance: float
):
    exact = Compose(FourierCrop(24), Normalize(8))(stack)
    half = Compose(FourierCrop(24), Normalize(8), data_type=data_type)
    from_numpy, from_torch = half(stack.astype(np.float16)), half(torch.from_numpy(stack))
    assert from_numpy.dtype == np.dtype(numpy_type) and from_torch.dtype == torch_type
    scale = np.abs(exact).max()
    np.testing.assert_allclose(from_numpy.astype(np.float32), exact, atol=tolerance * scale)
    np.testing.assert_allclose(from_torch.float().numpy(), exact, atol=tolerance * scale)


@pytest.mark.parametrize("data_type", ["float16", "bfloat16"])
def test_a_loader_hands_out_half_precision_from_any_stored_type(data_type: str, tmp_path):
    counts = np.arange(4 * 8 * 8, dtype=np.uint16).reshape(4, 8, 8)
    mrcfile.write(tmp_path / "counts.mrcs", counts)
    images = ImageSource([ImageLocation(tmp_path / "counts.mrcs", i) for i in range(4)])
    dataset = Dataset({"image": images, "defocus": np.full(4, 12345.678)})
    loader = DataLoader(dataset, 2, output="torch", data_type=data_type, transform=Invert())
    batches = list(loader)
    assert all(batch["image"].dtype == getattr(torch, data_type) for batch in batches)
    assert batches[0]["defocus"].dtype == torch.float64  # columns keep their type
    images = torch.cat([batch["image"] for batch in batches]).float().numpy()
    np.testing.assert_allclose(
        images, -counts.astype(np.float32), rtol=2 ** -(11 if data_type == "float16" else 8)
    )


def test_jax_batches_stay_jax_arrays_in_half_precision(tmp_path):
    mrcfile.write(tmp_path / "stack.mrcs", np.arange(3 * 8 * 8, dtype=np.int16).reshape(3, 8, 8))
    images = ImageSource([ImageLocation(tmp_path / "stack.mrcs", i) for i in range(3)])
    (batch,) = DataLoader(Dataset({"image": images}), 3, output="jax", data_type="bfloat16")
    assert type(batch["image"]).__module__.startswith("jax") and batch["image"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(np.asarray(batch["image"], np.float32)[0, 0], np.arange(8))


def test_transforms_refuse_what_they_cannot_do(stack: np.ndarray):
    with pytest.raises(ValueError, match="only shrinks"):
        FourierCrop(64)(stack)
    with pytest.raises(ValueError, match="no pixel"):
        Normalize(100)(stack)
    with pytest.raises(ValueError, match="positive"):
        FourierCrop(0)
    with pytest.raises(ValueError, match="data_type"):
        Compose(Invert(), data_type="int8")
    with pytest.raises(KeyError, match="'image'"):
        Invert()({"particles": stack})
    with pytest.raises(ValueError, match="data_type"):
        DataLoader(Dataset({"image": ArraySource(stack)}), data_type="float64")
    assert FourierCrop(24) == FourierCrop((24, 24)) != FourierCrop(25)
    assert repr(Compose(FourierCrop(24), Normalize(8))) == (
        "Compose(FourierCrop((24, 24)), Normalize(8.0), data_type='float32', field='image')"
    )


WITHOUT_ML_DTYPES = """
import sys

sys.modules["ml_dtypes"] = None  # as where it is not installed: importing it raises ModuleNotFoundError
import numpy as np
import torch
import vitrio as vio
from vitrio.data import Compose, DataLoader, Dataset, ImageSource, Invert, PreparedSource

path = sys.argv[1]
images = np.random.default_rng(0).standard_normal((6, 8, 8)).astype(np.float32) * 1000
vio.write_stack(images, path)
source = ImageSource([vio.ImageLocation(path, i) for i in range(6)])
(batch,) = DataLoader(Dataset({"image": source}), 6, output="torch", data_type="bfloat16")
assert batch["image"].dtype == torch.bfloat16
assert torch.equal(batch["image"], torch.from_numpy(images).to(torch.bfloat16))
steps = Compose(Invert(), data_type="bfloat16")
assert torch.equal(steps(torch.from_numpy(images)), torch.from_numpy(-images).to(torch.bfloat16))
for numpy_bfloat16 in (
    lambda: DataLoader(Dataset({"image": source}), 6, data_type="bfloat16"),
    lambda: steps(images),
    lambda: PreparedSource(source, steps)[0],
):
    try:
        numpy_bfloat16()
    except ModuleNotFoundError as error:
        print(error)
"""


def test_importing_vitrio_leaves_ml_dtypes_unimported_until_bfloat16_is_asked_for(tmp_path):
    """Importing ml_dtypes takes most of a second (it adds hundreds of loops to numpy's ufuncs): vitrio
    imports it when a numpy batch is first asked for in bfloat16, not before."""
    script = (
        "import sys, numpy as np, vitrio as vio\n"
        "from vitrio.data import DataLoader, Dataset, ImageSource\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported with vitrio'\n"
        "vio.write_stack(np.ones((2, 3, 4), np.float32), sys.argv[1])\n"
        "data = Dataset({'x': ImageSource([vio.ImageLocation(sys.argv[1], i) for i in (0, 1)])})\n"
        "(batch,) = DataLoader(data, 2)\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported by a float32 batch'\n"
        "(batch,) = DataLoader(data, 2, data_type='bfloat16')\n"
        "print(batch['x'].dtype, 'ml_dtypes' in sys.modules)\n"
    )
    stack = str(tmp_path / "stack.mrcs")
    run = subprocess.run([sys.executable, "-c", script, stack], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["bfloat16", "True"]


def test_torch_batches_are_bfloat16_without_ml_dtypes_and_numpy_s_name_the_extra(tmp_path):
    """PyTorch rounds to bfloat16 itself (to nearest, ties to even); bfloat16 held by numpy needs
    ml_dtypes, which the torch extra installs, and says so."""
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_ML_DTYPES, str(tmp_path / "stack.mrcs")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 3 and all("needs ml_dtypes: pip install 'vitrio[torch]'" in line for line in lines)
