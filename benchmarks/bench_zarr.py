"""Crops of an OME-Zarr tomogram, on disk and in a local S3 bucket: vitrio against zarr and dask.

A float32 tomogram (256 x 1024 x 1024 voxels, chunks of 64^3, zstd or blosc;
`--quick`: 128 x 256 x 256, chunks of 32^3) is written with vitrio's writer,
copied into a bucket of moto's S3 server (a process of its own on
127.0.0.1), and cropped at the
same random places (256 crops of 64 x 128 x 128; `--quick`: 64 of 32 x 64 x 64)
three ways, with each number of threads:

- vitrio: `vio.read_patches_async` in batches of 32 crops, on a loader of
  that many threads, with a chunk cache of its own for each run: as large as
  the tomogram (`--cache-mib`; a training run over a tomogram sets that), and
  256 MiB, the least the default (a quarter of the machine's memory) takes
  (`vitrio-256`);
- zarr: `zarr.open_array(...)[z0:z1, y0:y1, x0:x1]` per crop in a loop, zarr's
  own pool and concurrency set to that many threads;
- dask: `dask.array.from_zarr` sliced per crop, the slices of each batch of 32
  computed together on dask's threaded scheduler with that many workers.

Prints crops per second and vitrio's speed-up over each, then crops per
CPU-second of this process (all its threads; the S3 server's are not
counted), which a machine shared with other work changes less; and checks
that the three read the same values. Needs the `zarr` extra, `moto[server]` and `dask`.

`--copick-like` measures instead what a CryoET training epoch costs at the
defaults: two float32 tomograms of 256 x 512 x 512 in chunks of 256^3 (zstd;
`--quick`: 128 x 256 x 256 in chunks of 128^3), 600 subvolumes of 48^3 at
random centres in a shuffled `DataLoader` of `vio.loader(workers=2)` with no
format configured, for `--epochs` epochs, the process's chunk cache at its
default, at a tuned 1 GiB, and at 256 MiB (the old default; `--quick`:
32 MiB, as short of the smaller tomograms); `--repeats` times each, in turn.
Prints the median first and later epochs' seconds, and the later epochs'
chunk misses (`DataLoader.stats`).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import dask
import dask.array as da
import fsspec
import numpy as np
import zarr
from s3_server import start_s3

import vitrio as vio
from vitrio.bench.workloads import benchmark_parser
from vitrio.formats.zarr import OmeZarrFormat

BATCH = 32
FULL = {"shape": (256, 1024, 1024), "chunks": 64, "crop": (64, 128, 128), "crops": 256}
QUICK = {"shape": (128, 256, 256), "chunks": 32, "crop": (32, 64, 64), "crops": 64}


def make_store(folder: str, shape, chunks: int, codec: str) -> str:
    """Write a tomogram of normal noise as a one-level OME-Zarr store; its path."""
    path = os.path.join(folder, "tomo.zarr")
    values = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    written = OmeZarrFormat.configured(levels=1, chunks=chunks, codec=codec)
    vio.write_single(values, path, formats=[written])
    return path


def crops_at(shape, crop, count: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    return np.stack([rng.integers(0, n - c + 1, size=count) for n, c in zip(shape, crop)], axis=1)


def run_vitrio(key, options, origins, crop, threads, cache_bytes):
    formats = [OmeZarrFormat.configured(storage_options=options, cache_bytes=cache_bytes)]
    loader = vio.loader(workers=threads, cache=4, formats=formats)
    centres = origins + np.asarray(crop) // 2
    out = np.empty((BATCH, *crop), np.float32)
    first = None
    for start in range(0, len(origins), BATCH):
        batch = centres[start : start + BATCH]
        vio.read_patches_async(loader, out[: len(batch)], key, batch).get()
        first = out[0].copy() if first is None else first
    loader.executor.shutdown()
    return first


def run_zarr(key, options, origins, crop, threads):
    with zarr.config.set({"threading.max_workers": threads, "async.concurrency": threads}):
        array = zarr.open_array(key, path="0", mode="r", storage_options=options or None)
        first = None
        for z, y, x in origins.tolist():
            values = array[z : z + crop[0], y : y + crop[1], x : x + crop[2]]
            first = values if first is None else first
    return first


def run_dask(key, options, origins, crop, threads):
    array = da.from_zarr(key, component="0", storage_options=options or None)
    first = None
    for start in range(0, len(origins), BATCH):
        slices = [
            array[z : z + crop[0], y : y + crop[1], x : x + crop[2]]
            for z, y, x in origins[start : start + BATCH].tolist()
        ]
        values = dask.compute(*slices, scheduler="threads", num_workers=threads)
        first = values[0] if first is None else first
    return first


COPICK = {"shape": (256, 512, 512), "chunks": 256, "small_cache": 256 << 20}
COPICK_QUICK = {"shape": (128, 256, 256), "chunks": 128, "small_cache": 32 << 20}
SUBVOLUMES, SUBVOLUME = 600, 48


def copick_epochs(keys: list[str], centres: np.ndarray, epochs: int) -> tuple[list[float], int]:
    """Seconds of each epoch of a shuffled DataLoader over the subvolumes at the defaults, and the chunk
    misses of the epochs after the first."""
    OmeZarrFormat.clear_cache()
    images = [keys[i % len(keys)] for i in range(len(centres))]
    source = vio.data.PatchSource(images, centres, (SUBVOLUME,) * 3, "float32")
    reading = vio.loader(workers=2)
    loader = vio.data.DataLoader(
        vio.data.Dataset({"image": source}), batch_size=8, shuffle=True, loader=reading
    )
    seconds, misses = [], 0
    for _ in range(epochs):
        started = time.perf_counter()
        for _batch in loader:
            pass
        seconds.append(time.perf_counter() - started)
        misses += loader.stats.reads.zarr_chunk_misses if len(seconds) > 1 else 0
    reading.executor.shutdown()
    OmeZarrFormat.clear_cache()
    return seconds, misses


def copick_like(quick: bool, codec: str, epochs: int, repeats: int) -> None:
    size = COPICK_QUICK if quick else COPICK
    shape, chunks = size["shape"], size["chunks"]
    with tempfile.TemporaryDirectory(prefix="bench-zarr-") as folder:
        keys = []
        for number in range(2):
            os.mkdir(os.path.join(folder, str(number)))
            keys.append(make_store(os.path.join(folder, str(number)), shape, chunks, codec))
        rng = np.random.default_rng(2)
        half = SUBVOLUME // 2
        centres = np.stack([rng.integers(half, n - half + 1, SUBVOLUMES) for n in shape], axis=1)
        caches = {
            f"default ({vio.configuration().zarr_cache_bytes >> 20} MiB)": None,
            "tuned 1 GiB": 1 << 30,
            f"{size['small_cache'] >> 20} MiB": size["small_cache"],
        }
        print(
            f"2 tomograms {shape} float32, chunks {chunks}^3 {codec}; {SUBVOLUMES} subvolumes of "
            f"{SUBVOLUME}^3, batches of 8 on 2 threads; {epochs} epochs, {repeats} runs each"
        )
        firsts: dict[str, list[float]] = {name: [] for name in caches}
        laters: dict[str, list[float]] = {name: [] for name in caches}
        missed: dict[str, list[int]] = {name: [] for name in caches}
        for _ in range(repeats):
            for name, cache in caches.items():
                changes = {} if cache is None else {"zarr_cache_bytes": cache}
                with vio.configure(**changes):
                    seconds, misses = copick_epochs(keys, centres, epochs)
                firsts[name].append(seconds[0])
                laters[name] += seconds[1:]
                missed[name].append(misses)
        print(f"{'chunk cache':24} {'first epoch s':>14} {'later epoch s':>14} {'later misses':>13}")
        for name in caches:
            first, later = statistics.median(firsts[name]), statistics.median(laters[name])
            print(f"{name:24} {first:14.2f} {later:14.2f} {statistics.median(missed[name]):13.0f}")
        tuned = statistics.median(laters["tuned 1 GiB"])
        default = statistics.median(laters[next(iter(caches))])
        print(f"later epochs at the defaults: {default / tuned:.2f}x the tuned cache's time")


def main() -> None:
    parser = benchmark_parser(__doc__, "a small tomogram and few crops")
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--codec", choices=["zstd", "blosc"], default="zstd")
    parser.add_argument("--crops", type=int, help="how many crops (default 256, --quick 64)")
    parser.add_argument("--where", nargs="+", choices=["local", "s3"], default=["local", "s3"])
    parser.add_argument("--cache-mib", type=int, help="vitrio's chunk cache (default: the tomogram's size)")
    parser.add_argument("--copick-like", action="store_true", help="a CryoET epoch at the defaults instead")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each --copick-like run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each --copick-like cache")
    args = parser.parse_args()
    if args.copick_like:
        copick_like(args.quick, args.codec, args.epochs, args.repeats)
        return
    size = QUICK if args.quick else FULL
    count = args.crops or size["crops"]
    crop = size["crop"]
    with tempfile.TemporaryDirectory(prefix="bench-zarr-") as folder:
        started = time.perf_counter()
        path = make_store(folder, size["shape"], size["chunks"], args.codec)
        print(
            f"tomogram {size['shape']} float32, chunks {size['chunks']}^3 {args.codec}: "
            f"written in {time.perf_counter() - started:.1f} s"
        )
        places = {}
        server = None
        try:
            if "local" in args.where:
                places["local"] = (path, {})
            if "s3" in args.where:
                server, options = start_s3()
                fs = fsspec.filesystem("s3", **options)
                fs.call_s3("create_bucket", Bucket="bench")
                started = time.perf_counter()
                fs.put(path, "bench/tomo.zarr", recursive=True)
                took = time.perf_counter() - started
                print(f"copied to s3://bench/tomo.zarr on {options['endpoint_url']} in {took:.1f} s")
                places["s3"] = ("s3://bench/tomo.zarr", options)
            origins = crops_at(size["shape"], crop, count)
            print(f"{count} crops of {crop}, batches of {BATCH}")
            cache = (args.cache_mib << 20) if args.cache_mib else int(np.prod(size["shape"])) * 4
            methods = {
                "vitrio": lambda *a: run_vitrio(*a, cache),
                "vitrio-256": lambda *a: run_vitrio(*a, 256 << 20),
                "zarr": run_zarr,
                "dask": run_dask,
            }
            print(f"vitrio's chunk cache: {cache >> 20} MiB; vitrio-256's: 256 MiB")
            header = ("where", "threads", *methods, "vs zarr", "vs dask")
            print(f"{header[0]:6} " + " ".join(f"{h:>8}" for h in header[1:]))
            for where, (key, options) in places.items():
                for threads in args.threads:
                    rates, thrift, firsts = {}, {}, {}
                    for name, run in methods.items():
                        started, cpu = time.perf_counter(), time.process_time()
                        firsts[name] = run(key, options, origins, crop, threads)
                        rates[name] = count / (time.perf_counter() - started)
                        thrift[name] = count / (time.process_time() - cpu)
                    for name in methods:
                        np.testing.assert_array_equal(firsts["vitrio"], firsts[name])
                    figures = [f"{rates[name]:{max(8, len(name))}.1f}" for name in methods]
                    gains = [f"{rates['vitrio'] / rates[name]:7.1f}x" for name in ("zarr", "dask")]
                    print(f"{where:6} {threads:8d} " + " ".join(figures + gains), flush=True)
                    figures = [f"{thrift[name]:{max(8, len(name))}.1f}" for name in methods]
                    gains = [f"{thrift['vitrio'] / thrift[name]:7.1f}x" for name in ("zarr", "dask")]
                    print(f"{'  /cpu':6} {threads:8d} " + " ".join(figures + gains), flush=True)
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)


if __name__ == "__main__":
    main()
