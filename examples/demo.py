"""The main job of vitrio on built-in data: a particle stack written, then read in shuffled batches.

    python examples/demo.py [--out DIR] [--images N]

Writes a synthetic stack of particle images as MRC, reads it back through a
loader of 2 threads in shuffled batches of 256, checks every batch against
the images written, and prints the throughput next to reading one image at
a time with `vitrio.read`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import vitrio as vio


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="where to write the stack (default: a temp dir)"
    )
    parser.add_argument("--images", type=int, default=8192, help="how many 128x128 images the stack holds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        out = args.out or Path(temporary)
        out.mkdir(parents=True, exist_ok=True)
        run(out / "particles.mrcs", args.images)


def run(path: Path, count: int) -> None:
    rng = np.random.default_rng(0)
    images = rng.standard_normal((count, 128, 128), dtype=np.float32)
    start = time.perf_counter()
    vio.write_stack(images, path)
    print(f"wrote {count} images of 128x128 to {path.name} in {time.perf_counter() - start:.2f} s")
    print(f"  {vio.query_descriptor(path)}")

    locations = [vio.ImageLocation(path, i) for i in range(count)]
    loader = vio.loader(workers=2, cache=4)
    order = rng.permutation(count)
    batches = [order[i : i + 256] for i in range(0, count, 256)]
    start = time.perf_counter()
    for rows in batches:
        batch = np.empty((len(rows), 128, 128), dtype=np.float32)
        vio.read_batch_async(loader, batch, [locations[i] for i in rows]).get()
        if not np.array_equal(batch, images[rows]):
            raise SystemExit("a batch does not hold the images written")
    batched = count / (time.perf_counter() - start)

    start = time.perf_counter()
    for i in order[:1024]:
        vio.read(locations[i])
    single = 1024 / (time.perf_counter() - start)
    print(f"read {count} images in shuffled batches of 256: {batched:,.0f} images/s, every batch checked")
    print(
        f"read one image at a time with vitrio.read: {single:,.0f} images/s ({batched / single:.0f}x slower)"
    )


if __name__ == "__main__":
    main()
