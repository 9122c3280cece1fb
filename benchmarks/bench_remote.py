"""A shuffled epoch of particles in MRC stacks in a local S3 bucket: vitrio against a loop and a download.

200 stacks of 100 particles of 64 x 64 float32 (`--quick`: 20 of 50) are put
into a bucket of moto's S3 server (a process of its own on 127.0.0.1,
`s3_server.py`), which answers each request at once, then after holding it
20 ms (`--latency-ms`), as a real network's latency does. One shuffled epoch
is read in batches of 256 (`--batch`):

- vitrio: `vio.read_batch_async` on `vio.loader(workers=16, storage_options=...)`,
  one batch at a time; images per second and requests per batch (counted
  at the server);
- vitrio.data: `vio.data.DataLoader` over an `ImageSource` of the particles,
  on a loader of its own as above, with its default of 4 batches under way,
  as a training loop reads them;
- loop: each particle opened with `fsspec.open`, its header parsed by
  mrcfile and its image read, one after another (the first 400 particles,
  `--quick` 100; the rate is theirs);
- download: `s3fs.get` of every stack into a folder, then the epoch read from
  it by vitrio; the time of both;
- scratch: the epoch read again by vitrio through a mapped scratch that the
  first epoch filled: images per second and requests (none are due).

Prints images per second of each and vitrio's speed-ups over the loop.
Needs `moto[server]`, s3fs and mrcfile.
"""

from __future__ import annotations

import os
import tempfile
import time

import fsspec
import mrcfile.mrcinterpreter
import numpy as np
from s3_server import requests, set_delay, start_s3

import vitrio as vio
from vitrio.bench.workloads import benchmark_parser

SHAPE = (64, 64)


def make_stacks(options: dict, folder: str, stacks: int, per_stack: int) -> list[str]:
    """Write and put the stacks into the bucket; their URLs."""
    fs = fsspec.filesystem("s3", **options)
    fs.call_s3("create_bucket", Bucket="particles")
    rng = np.random.default_rng(0)
    urls = []
    for n in range(stacks):
        path = os.path.join(folder, f"stack_{n:03d}.mrcs")
        vio.write_stack(rng.standard_normal((per_stack, *SHAPE), dtype=np.float32), path)
        fs.put(path, f"particles/stack_{n:03d}.mrcs")
        urls.append(f"s3://particles/stack_{n:03d}.mrcs")
    return urls


def epoch(loader, locations, order, size: int) -> float:
    """Seconds to read `locations` in `order`, `size` at a time."""
    out = np.empty((size, *SHAPE), np.float32)
    start = time.perf_counter()
    for first in range(0, len(order), size):
        batch = [locations[i] for i in order[first : first + size]]
        vio.read_batch_async(loader, out[: len(batch)], batch).get()
    return time.perf_counter() - start


def data_epoch(loader, locations, size: int) -> float:
    """Seconds for `vio.data.DataLoader` to hand out one shuffled epoch of `locations`, `size` at a time."""
    source = vio.data.ImageSource(locations, readers=loader.readers, check=False)
    dataset = vio.data.Dataset({"image": source})
    batches = vio.data.DataLoader(dataset, size, shuffle=True, seed=3, loader=loader)
    start = time.perf_counter()
    for _ in batches:
        pass
    return time.perf_counter() - start


def loop(options, locations, count) -> float:
    """Seconds to read the first `count` particles one at a time with fsspec and mrcfile."""
    start = time.perf_counter()
    for location in locations[:count]:
        with fsspec.open(location.key, "rb", **options) as file:
            header = mrcfile.mrcinterpreter.MrcInterpreter(iostream=file, permissive=True, header_only=True)
            offset = header.header.nbytes + int(header.header.nsymbt)
            file.seek(offset + location.index_in_stack * 4 * SHAPE[0] * SHAPE[1])
            np.frombuffer(file.read(4 * SHAPE[0] * SHAPE[1]), np.float32)
    return time.perf_counter() - start


def run(options, delay, urls, per_stack, looped, folder, size) -> None:
    set_delay(options, delay)
    locations = [vio.ImageLocation(url, i) for url in urls for i in range(per_stack)]
    order = np.random.default_rng(1).permutation(len(locations))
    batches = -(-len(order) // size)
    loader = vio.loader(workers=16, storage_options=options)
    before = requests(options)
    seconds = epoch(loader, locations, order, size)
    asked = requests(options) - before
    rate = len(order) / seconds
    print(
        f"  vitrio      {rate:9.0f} images/s   {asked / batches:6.1f} requests a batch (the headers included)"
    )
    loop_rate = looped / loop(options, [locations[i] for i in order], looped)
    print(
        f"  loop        {loop_rate:9.0f} images/s   (fsspec.open + mrcfile each)   "
        f"vitrio x{rate / loop_rate:.1f}"
    )
    before = requests(options)
    seconds = data_epoch(vio.loader(workers=16, storage_options=options), locations, size)
    asked = requests(options) - before
    print(
        f"  vitrio.data {len(order) / seconds:9.0f} images/s   {asked / batches:6.1f} requests a batch   "
        f"(4 batches under way)   x{len(order) / seconds / loop_rate:.1f} the loop"
    )
    local = os.path.join(folder, f"down-{delay}")
    start = time.perf_counter()
    fsspec.filesystem("s3", **options).get([u.removeprefix("s3://") for u in urls], local + "/")
    fetched = time.perf_counter() - start
    local_locations = [
        vio.ImageLocation(os.path.join(local, os.path.basename(u)), i) for u in urls for i in range(per_stack)
    ]
    read = epoch(vio.loader(workers=16), local_locations, order, size)
    print(
        f"  download    {len(order) / (fetched + read):9.0f} images/s   (s3fs.get {fetched:.1f} s, "
        f"then local reads at {len(order) / read:.0f}/s)"
    )
    scratch = vio.create_mapped_file_image_scratch(
        locations,
        os.path.join(folder, f"epochs-{delay}.scratch"),
        16,
        files=vio.reader_provider(storage_options=options),
    )
    cached = vio.loader(workers=16, scratch=scratch, storage_options=options)
    epoch(cached, locations, order, size)
    before = requests(options)
    second = epoch(cached, locations, np.random.default_rng(2).permutation(len(order)), size)
    print(
        f"  scratch     {len(order) / second:9.0f} images/s   "
        f"second epoch, {requests(options) - before} requests"
    )


def main() -> None:
    parser = benchmark_parser(__doc__, "20 stacks of 50 particles")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="the delay of each request (20)")
    parser.add_argument("--batch", type=int, default=256, help="images a batch (256)")
    args = parser.parse_args()
    stacks, per_stack, looped = (20, 50, 100) if args.quick else (200, 100, 400)
    server, options = start_s3()
    try:
        with tempfile.TemporaryDirectory() as folder:
            urls = make_stacks(options, folder, stacks, per_stack)
            for delay in (0.0, args.latency_ms / 1000):
                print(f"{stacks * per_stack} particles in {stacks} stacks, {delay * 1000:.0f} ms a request:")
                run(options, delay, urls, per_stack, looped, folder, args.batch)
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
