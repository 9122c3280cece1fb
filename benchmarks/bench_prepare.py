"""Preparing particles: vitrio's batched transforms against a loop of numpy FFTs, and prepared epochs.

    python benchmarks/bench_prepare.py [--quick] [--particles N] [--device cuda]

A stack of particles of 256 x 256 (20,000; 1,000 with --quick) in an MRC
file, Fourier cropped to 128 x 128 and normalised (background radius 48):

1. the transform alone, in images per second, on the first 4,096 in memory: `Compose(FourierCrop(128),
   Normalize(48))` on batches of 256, against a loop of numpy FFTs, one
   image at a time, and against cryoDRGN's `downsample` (its Hartley
   transforms, batched as it runs them) where cryoDRGN is installed;
   with --device, the same batches as PyTorch tensors on that device;
2. epochs of a DataLoader, in images per second: preparing every batch on
   the fly every epoch (`transform=`) against a `PreparedSource`, whose
   first epoch reads and prepares and whose later ones copy from memory;
   and a `PreparedSource` whose scratch is a file (`scratch=`): epochs of
   the program that fills it, then of a later one that serves it (a new
   `PreparedSource` over the same file, which reads and computes nothing;
   the file is in the page cache).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import mrcfile
import numpy as np

import vitrio as vio
from vitrio.bench.workloads import benchmark_parser
from vitrio.data import Compose, DataLoader, Dataset, FourierCrop, ImageSource, Normalize, PreparedSource
from vitrio.data._transforms import prepare_batch

SIDE, CROPPED, RADIUS, BATCH = 256, 128, 48, 256
SAMPLE = 4096  # the particles the transforms alone are timed on (1 GiB)


def numpy_loop(images: np.ndarray) -> np.ndarray:
    """Each image cropped in Fourier space and normalised, one numpy FFT at a time."""
    out = np.empty((len(images), CROPPED, CROPPED), np.float32)
    start = SIDE // 2 - CROPPED // 2
    y, x = np.ogrid[:CROPPED, :CROPPED]
    outside = (y - CROPPED // 2) ** 2 + (x - CROPPED // 2) ** 2 > RADIUS**2
    for i, image in enumerate(images):
        spectrum = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(image)))
        cropped = spectrum[start : start + CROPPED, start : start + CROPPED]
        hartley = cropped.real - cropped.imag
        back = np.fft.fft2(np.fft.ifftshift(hartley))
        small = np.fft.fftshift(back.real - back.imag) / CROPPED**2
        background = small[outside]
        out[i] = (small - background.mean()) / background.std()
    return out


def rate(count: int, function) -> float:
    start = time.perf_counter()
    function()
    return count / (time.perf_counter() - start)


def transform_rates(path: Path, count: int, device: str | None) -> None:
    """Images per second of each way, on the first particles (at most SAMPLE), read into memory first."""
    steps = Compose(FourierCrop(CROPPED), Normalize(RADIUS))
    with mrcfile.mmap(path, permissive=True) as mrc:
        sample = np.array(mrc.data[:SAMPLE])
    batches = [sample[i : i + BATCH] for i in range(0, len(sample), BATCH)]
    _transform_rates(steps, batches, len(sample), device)


def _transform_rates(steps: Compose, batches: list, count: int, device: str | None) -> None:
    executor = vio.ThreadPoolExecutor(os.cpu_count() or 1)
    batched = rate(count, lambda: [steps(b) for b in batches])
    threaded = rate(count, lambda: [prepare_batch(steps, b, executor) for b in batches])
    print(f"vitrio, batches of {BATCH} (numpy): {batched:,.0f} images/s")
    print(f"vitrio, batches of {BATCH} (numpy, on {executor.worker_count} threads): {threaded:,.0f} images/s")
    loop = batches[: max(1, len(batches) // 4)]
    looped = sum(map(len, loop))
    one_by_one = rate(looped, lambda: [numpy_loop(b) for b in loop])
    print(f"numpy FFTs, one image at a time: {one_by_one:,.0f} images/s")
    try:
        from cryodrgn import fft as cryodrgn_fft
    except ImportError:
        print("cryoDRGN downsample: skipped, cryoDRGN is not installed")
    else:
        import torch

        start = SIDE // 2 - CROPPED // 2

        def downsample() -> None:
            for batch in batches:
                spectrum = cryodrgn_fft.ht2_center(torch.from_numpy(np.array(batch)))
                cryodrgn_fft.iht2_center(spectrum[:, start : start + CROPPED, start : start + CROPPED])

        print(f"cryoDRGN downsample (crop only): {rate(count, downsample):,.0f} images/s")
    if device is not None:
        import torch

        steps(torch.from_numpy(np.array(batches[0])).to(device))  # warm up the device's FFT plans

        def on_device() -> None:
            for batch in batches:
                steps(torch.from_numpy(np.array(batch)).to(device))
            if device.startswith("cuda"):
                torch.cuda.synchronize()

        torched = rate(count, on_device)
        print(f"vitrio, batches of {BATCH} (torch on {device}, copies included): {torched:,.0f} images/s")


def epoch_rates(path: Path, count: int, epochs: int, scratch: Path) -> None:
    steps = Compose(FourierCrop(CROPPED), Normalize(RADIUS))
    images = ImageSource([vio.ImageLocation(path, i) for i in range(count)])
    on_the_fly = DataLoader(Dataset({"image": images}), BATCH, shuffle=True, transform=steps)
    for epoch in range(epochs):
        print(f"on the fly, epoch {epoch + 1}: {rate(count, lambda: list(on_the_fly)):,.0f} images/s")
    prepared = DataLoader(Dataset({"image": PreparedSource(images, steps)}), BATCH, shuffle=True)
    for epoch in range(epochs):
        print(f"prepared scratch, epoch {epoch + 1}: {rate(count, lambda: list(prepared)):,.0f} images/s")
    for program in ("filling", "a later program"):
        on_disk = PreparedSource(images, steps, scratch=scratch)
        loader = DataLoader(Dataset({"image": on_disk}), BATCH, shuffle=True)
        for epoch in range(epochs):
            figure = rate(count, lambda batches=loader: list(batches))
            print(f"prepared scratch file, {program}, epoch {epoch + 1}: {figure:,.0f} images/s")


def main() -> None:
    parser = benchmark_parser(__doc__, "1,000 particles")
    parser.add_argument("--particles", type=int, help="how many particles (default 20,000)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each loader")
    parser.add_argument("--device", help="also transform PyTorch tensors on this device (cpu, cuda)")
    args = parser.parse_args()
    count = args.particles or (1000 if args.quick else 20_000)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "particles.mrcs"
        rng = np.random.default_rng(0)
        with mrcfile.new_mmap(path, shape=(count, SIDE, SIDE), mrc_mode=2) as mrc:
            for first in range(0, count, 1000):
                chunk = mrc.data[first : first + 1000]
                chunk[...] = rng.standard_normal(chunk.shape, dtype=np.float32)
        print(
            f"{count:,} particles of {SIDE} x {SIDE} to {CROPPED} x {CROPPED}, normalised (radius {RADIUS})"
        )
        transform_rates(path, count, args.device)
        epoch_rates(path, count, args.epochs, Path(folder) / "prepared.scratch")


if __name__ == "__main__":
    main()
