"""`vitrio convert`: images, stacks or volumes from one format to another, streamed a chunk at a time.

Several files are converted into a folder, one after the other, or one
task per file on a Dask cluster (`--scheduler`, `--local`): each task
writes its file as a run here would, so that running it twice leaves the
same file, and reads a file at a URL with the `--storage-options` given.
The commands that run on clusters share `cluster` and `run_per_file` from
here.

A conversion never changes a value silently: a type the output's format
lacks is widened to one it stores that holds every value (uint8 to uint16 in
MRC), and refused where none does (MRC has no int32 or float64); values
that the type cannot hold (beyond its range, or fractions for an integer
type, or not finite) stop it, naming the file and their range,
unless the user asks for them to be scaled onto the type's range
(`--scale`) or rounded and clipped into it (`--clip`). The voxel size of
the input is written into the output where its format stores one.

`--fourier-crop`, `--normalize` and `--invert` prepare 2-D images on the
way (vitrio.data's transforms, in float32, before the conversion to the
type written); a Fourier crop grows the pixel size written by its ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np

import vitrio as vio
from vitrio.dask import client_for, remove_leftovers, run_jobs
from vitrio.data import Compose, FourierCrop, Invert, Normalize, Transform
from vitrio.data._transforms import prepare_batch

from ._common import (
    CliError,
    add_casting,
    add_cluster,
    add_force,
    add_preparing,
    add_storage_options,
    check_output,
    data_type,
    describe_briefly,
    file_or_url,
    folders_for,
    progress,
    replacing,
)

if TYPE_CHECKING:
    import distributed

__all__ = [
    "DESCRIPTION",
    "HELP",
    "STORED_TYPES",
    "add_arguments",
    "cluster",
    "copy_images",
    "outputs_of",
    "prepared_shape",
    "preparing",
    "run",
    "run_per_file",
    "scaled_voxel_size",
]

# The types each format stores as they are, by the format's name; a plug-in's format is not checked here.
STORED_TYPES = {
    "mrc": tuple(map(np.dtype, ("int8", "int16", "uint16", "float16", "float32", "complex64"))),
    "tiff": tuple(
        map(np.dtype, ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16"))
    )
    + tuple(map(np.dtype, ("float32", "float64", "complex64", "complex128"))),
}


def _stored_type(output: Path, dtype: np.dtype, given: bool) -> np.dtype:
    """The type `output` is written as: `dtype`, or where its format lacks `dtype` and no type was
    given, the narrowest it stores that holds every value of `dtype`, of the same kind first (uint8
    into MRC is written as uint16, as `write_stack` writes it).

    Raises:
        CliError: If the format does not store `dtype` as it is, and it was given or no stored type
            holds all its values.
    """
    extension = output.suffix.lower()
    format_name = next(
        (f.name for f in vio.formats.registered_formats() if extension in f.write_extensions), None
    )
    stored = STORED_TYPES.get(format_name or "")
    if stored is None or dtype in stored:
        return dtype
    kind = "u" if dtype.kind == "b" else dtype.kind
    wider = [t for t in stored if np.can_cast(dtype, t, "safe")]
    if wider and not given:
        return min(wider, key=lambda t: (t.kind != kind, t.itemsize))
    names = ", ".join(t.name for t in stored)
    advice = "" if given else "; give --data-type"
    raise CliError(f"{output}: {format_name} cannot store {dtype.name} values; it stores {names}{advice}")


def preparing(args: argparse.Namespace) -> Compose | None:
    """The transforms `--fourier-crop`, `--normalize` and `--invert` ask for, in that order; None if none."""
    steps: list[Transform] = []
    if args.fourier_crop is not None:
        steps.append(FourierCrop(args.fourier_crop))
    if args.normalize is not None:
        steps.append(Normalize(args.normalize))
    if args.invert:
        steps.append(Invert())
    return Compose(*steps) if steps else None


def prepared_shape(prepare: Compose, source: Path | str, shape: tuple[int, ...]) -> tuple[int, int]:
    """The shape of the images of `shape` once prepared.

    Raises:
        CliError: If they are not 2-D, or the transforms refuse them.
    """
    if len(shape) != 2:
        raise CliError(f"{source}: --fourier-crop, --normalize and --invert prepare 2-D images, not {shape}")
    try:
        return prepare.apply(np.zeros((1, *shape), dtype=np.float32)).shape[1:]
    except ValueError as error:
        raise CliError(f"{source}: {error}") from None


def scaled_voxel_size(voxel_size: Any, before: Sequence[int], after: Sequence[int]) -> Any:
    """The voxel size of images of shape `before` resampled to `after`: each axis grown by the ratio."""
    if voxel_size is None:
        return None
    sizes = np.broadcast_to(np.asarray(voxel_size, dtype=np.float64), (len(before),))
    return tuple(float(size * old / new) for size, old, new in zip(sizes, before, after))


def _bounds(dtype: np.dtype) -> tuple[float, float] | None:
    """The least and greatest values of a real type; None for a complex or boolean one."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return float(info.min), float(info.max)
    if dtype.kind == "f":
        finite = float(np.finfo(dtype).max)
        return -finite, finite
    return None


class _Conversion:
    """How the values of a file become those of another type: as they are, scaled, or clipped.

    Args:
        source: The file, to name in errors.
        source_type: The type it holds.
        target: The type to write.
        mode: None to refuse values the target cannot hold, "scale" to map
            `span` onto its range, "clip" to round and clip them into it,
            "unsafe" to convert as numpy's `casting="unsafe"` does.
        span: The least and greatest finite values of the file, for "scale".
    """

    def __init__(
        self,
        source: Path | str,
        source_type: np.dtype,
        target: np.dtype,
        mode: str | None,
        span: tuple[float, float] | None,
    ):
        self.source, self.target, self.mode, self.span = source, target, mode, span
        self.bounds = _bounds(target)
        self.checked = mode != "unsafe" and not (
            np.can_cast(source_type, target, "safe") or self.bounds is None or source_type.kind == "c"
        )
        self.casting = "unsafe" if mode == "unsafe" else None
        if mode == "scale" and target.kind not in "iu":
            raise CliError(f"--scale maps values onto the range of an integer type, not of {target.name}")

    def __call__(self, values: np.ndarray, out: np.ndarray) -> None:
        """Write `values` into `out`, of the target type.

        Raises:
            CliError: If a value cannot be held and no mode says what to do.
        """
        if not self.checked:
            out[...] = values
            return
        low, high = self.bounds
        integer = self.target.kind in "iu"
        if self.mode == "scale":
            lo, hi = self.span
            scaled = (np.nan_to_num(values, nan=lo) - lo) * ((high - low) / (hi - lo) if hi > lo else 0.0)
            np.rint(np.clip(scaled + low, low, high), out=out, casting="unsafe")
        elif self.mode == "clip":
            values = np.nan_to_num(values, nan=0.0, posinf=high, neginf=low)
            np.clip(np.rint(values) if integer else values, low, high, out=out, casting="unsafe")
        else:
            self._refuse_unheld(values, low, high, integer)
            out[...] = values

    def _refuse_unheld(self, values: np.ndarray, low: float, high: float, integer: bool) -> None:
        floating = values.dtype.kind == "f"
        held = values[np.isfinite(values)] if floating and not integer else values
        if held.size == 0:
            return
        finite = not floating or bool(np.isfinite(held).all())
        lo, hi = float(np.nanmin(held)), float(np.nanmax(held))
        whole = not (integer and floating) or bool(np.equal(np.mod(held, 1), 0).all())
        inside = low <= lo and hi <= high
        if finite and whole and inside:
            return
        why = "not finite" if not finite else "beyond its range" if not inside else "fractions"
        raise CliError(
            f"{self.source}: values from {lo:.6g} to {hi:.6g} ({why}) cannot be held by {self.target.name} "
            f"({low:.6g} to {high:.6g}); give --scale to map them onto its range, --clip to "
            f"{'round and ' if integer else ''}clip them into it, or --casting unsafe to convert them as "
            "numpy's casting='unsafe' does"
        )


def _span(
    loader: vio.ImageLoader, sources: list, shape: tuple[int, ...], dtype: np.dtype, chunk: int
) -> tuple[float, float]:
    """The least and greatest finite values of the images at `sources`, read a chunk at a time."""
    lo, hi = math.inf, -math.inf
    for first in range(0, len(sources), chunk):
        values = np.empty((min(chunk, len(sources) - first), *shape), dtype=dtype)
        vio.read_batch_async(loader, values, sources[first : first + chunk]).get()
        finite = values[np.isfinite(values)] if dtype.kind == "f" else values
        if finite.size:
            lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
    return (lo, hi) if lo <= hi else (0.0, 0.0)


def copy_images(
    loader: vio.ImageLoader,
    source: Path | str,
    output: Path,
    data_type: np.dtype | None,
    force: bool,
    mode: str | None = None,
    prepare: Compose | None = None,
) -> vio.ImageDescriptor:
    """Copy what the file at `source` holds, as `loader` reads it, into a new file at `output`.

    A stack is read and written a chunk of images at a time, the next chunk
    read while the last one is written, so that memory stays bounded
    whatever the size of the stack; its stacking axes are flattened into
    one. A single image or volume is copied whole. The output is written
    beside its path and moved onto it at the end: a failure or an
    interruption leaves nothing at `output`.

    Args:
        loader: What reads `source`; its executor also writes.
        source: The file to read.
        output: The file to write, in the format its extension names.
        data_type: The type to write; None for the source's.
        force: Whether to replace a file at `output`.
        mode: What to do with values `data_type` cannot hold: None to
            refuse them, "scale" to map the file's range onto the type's
            (reading the file twice), "clip" to round and clip them into it.
        prepare: Transforms of the 2-D images, run in float32 before the
            conversion to the type written; a crop grows the voxel size by its ratio.

    Returns:
        What the written file holds.

    Raises:
        CliError: If `output` exists and `force` is false, or is `source`;
            if the format of `output` does not store the type as it is, or a
            value cannot be held by it and `mode` is None; if `prepare` is
            given with `mode` "scale" or for images that are not 2-D.
    """
    reader = loader.readers.acquire(str(source))
    try:
        descriptor, voxel_size = reader.descriptor, reader.voxel_size
    finally:
        loader.readers.release(reader)
    check_output(output, force)
    if isinstance(source, Path) and output.exists() and output.resolve() == source.resolve():
        raise CliError(f"{output}: is the input file; write to another path")
    source_type = descriptor.data_type.dtype
    core = descriptor.core_extents
    if prepare is not None:
        if mode == "scale":
            raise CliError("--scale maps the input's range; it does not go with transforms of the images")
        prepared = prepared_shape(prepare, source, core)
        voxel_size = scaled_voxel_size(voxel_size, core, prepared)
        core, read_shape, source_type = prepared, core, np.dtype(np.float32)
    dtype = _stored_type(output, data_type or source_type, data_type is not None)
    if descriptor.is_stack:
        count = descriptor.image_count
        written = vio.ImageDescriptor((count, *core), descriptor.core_rank, dtype)
        sources = [vio.ImageLocation(source, i) for i in range(count)]
        targets = [vio.ImageLocation(output, i) for i in range(count)]
        largest = max(math.prod(core), math.prod(descriptor.core_extents))
        image_bytes = largest * max(dtype.itemsize, source_type.itemsize)
        # about `chunk_bytes` of images a chunk: two are in memory at once, one read and one written
        chunk = max(1, vio.configuration().chunk_bytes // max(1, image_bytes))
        shape = core
    else:
        count, chunk, shape = 1, 1, core if prepare is not None else descriptor.extents
        written = vio.ImageDescriptor(shape, descriptor.core_rank, dtype)
        sources, targets = [str(source)], [str(output)]
    span = _span(loader, sources, shape, source_type, chunk) if mode == "scale" else None
    convert = _Conversion(source, source_type, dtype, mode, span)
    pending: deque[tuple[int, vio.Completion]] = deque()
    with (
        folders_for(output),
        replacing(output),
        vio.writer_provider() as writers,
        progress(count, output.name, "image") as bar,
    ):
        saver = vio.saver(writers, executor=loader.executor)
        writers.declare(output, written, voxel_size=voxel_size)

        def finish_oldest() -> None:  # it leaves the queue once done: the `finally` waits for all that runs
            done, completion = pending[0]
            completion.get()
            pending.popleft()
            bar.update(done)

        try:
            for first in range(0, count, chunk):
                last = min(first + chunk, count)
                values = np.empty((last - first, *shape), dtype=dtype)
                if prepare is not None:
                    read = np.empty((last - first, *read_shape), dtype=np.float32)
                    vio.read_batch_async(loader, read, sources[first:last], "unsafe").get()
                    convert(prepare_batch(prepare.apply, read, loader.executor), values)
                elif convert.checked:
                    read = np.empty(values.shape, dtype=source_type)
                    vio.read_batch_async(loader, read, sources[first:last]).get()
                    convert(read, values)
                else:
                    vio.read_batch_async(loader, values, sources[first:last], convert.casting).get()
                pending.append((last - first, vio.write_batch_async(saver, values, targets[first:last])))
                if len(pending) > 1:
                    finish_oldest()
            while pending:
                finish_oldest()
        except BaseException:
            writers.discard(output)  # the writes under way stop at their next image
            raise
        finally:
            for _, completion in pending:
                completion.wait()
    return written


@contextlib.contextmanager
def cluster(args: argparse.Namespace) -> Iterator[distributed.Client | None]:
    """The client of the Dask cluster `args.scheduler` or `args.local` names, its dashboard shown; else None.

    Raises:
        CliError: If `args.dashboard` asks for a dashboard with no local cluster to serve it.
    """
    if args.dashboard and args.local is None:
        raise CliError("--dashboard goes with --local: a scheduler serves its own dashboard")
    if args.scheduler is None and args.local is None:
        yield None
        return
    with client_for(args.scheduler, args.local, args.dashboard) as client:
        with contextlib.suppress(KeyError):  # a scheduler without a dashboard
            if args.scheduler is not None or args.dashboard:
                print(f"vitrio: Dask dashboard at {client.dashboard_link}", file=sys.stderr)
        yield client


def outputs_of(inputs: Sequence[Path], output: Path, suffix: str) -> list[Path]:
    """Where each input is written: at `output` for one, in the folder `output` under its stem otherwise.

    Raises:
        CliError: If `output` is a file while there are several inputs, or two inputs share a stem.
    """
    if len(inputs) == 1:
        return [output]
    if output.exists() and not output.is_dir():
        raise CliError(f"{output}: is not a folder; the files of several inputs are written into a folder")
    suffix = suffix if suffix.startswith(".") else f".{suffix}"
    written: dict[Path, Path] = {}
    for source in inputs:
        target = output / f"{PurePosixPath(urlsplit(str(source)).path).stem}{suffix}"
        if target in written:
            raise CliError(f"{written[target]} and {source}: would both be written to {target}")
        written[target] = source
    return list(written)


def run_per_file(
    client: distributed.Client, function: Callable[[Any], Any], jobs: list, outputs: list[Path], name: str
) -> list[Any]:
    """Run `function(job)`, one task per file, on the cluster of `client`, with a bar of the files done.

    What a worker killed mid-write left beside `outputs` is removed at the end.
    """
    with progress(len(jobs), name, "file") as bar:
        try:
            return run_jobs(client, function, jobs, f"vitrio-{name}", lambda *_: bar.update(1))
        finally:
            remove_leftovers(outputs)


def _convert_file(
    job: tuple[Path | str, Path, np.dtype | None, str | None, Compose | None, Any],
) -> vio.ImageDescriptor:
    """Convert one file on a worker, replacing what an earlier run of the task wrote; a file at a URL is
    reached through the storage the task carries (its options and configuration)."""
    source, output, data_type, mode, prepare, storage = job
    loader = vio.loader(cache=1, storage_options=storage)
    return copy_images(loader, source, output, data_type, True, mode, prepare)


HELP = "convert between MRC and TIFF"
DESCRIPTION = (
    "Convert an image, stack or volume between MRC and TIFF (or any vitrio reads, to MRC or TIFF), a chunk "
    "of images at a time, so that a stack of any size streams in bounded memory. The format of OUT is "
    "chosen by its extension (.mrc .mrcs .map .tif .tiff). Several files are written into the folder OUT, "
    "each under its name with --suffix."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio convert`."""
    parser.add_argument(
        "input", type=file_or_url, nargs="+", metavar="IN", help="the files (or store URLs) to read"
    )
    parser.add_argument("output", type=Path, metavar="OUT", help="the file to write, or the folder")
    parser.add_argument(
        "--suffix", default=".mrc", help="with several inputs, the extension of the files written (.mrc)"
    )
    parser.add_argument("--data-type", type=data_type, help="the type to write (default: the input's)")
    add_storage_options(parser)
    values = parser.add_mutually_exclusive_group()
    values.add_argument(
        "--scale",
        action="store_true",
        help="map the input's range of values onto the whole range of the integer --data-type",
    )
    values.add_argument(
        "--clip",
        action="store_true",
        help="round and clip values into the range of --data-type (without it, values it cannot hold "
        "stop the conversion)",
    )
    add_casting(values)
    add_preparing(parser)
    add_force(parser)
    add_cluster(parser)


def run(args: argparse.Namespace) -> None:
    """Convert `args.input` into `args.output`, as `args.data_type` if given, scaled or clipped if asked."""
    mode = "scale" if args.scale else "clip" if args.clip else "unsafe" if args.casting else None
    prepare = preparing(args)
    outputs = outputs_of(args.input, args.output, args.suffix)
    if len(outputs) > 1:
        for output in outputs:
            check_output(output, args.force)
        args.output.mkdir(parents=True, exist_ok=True)
    storage = vio.Storage.of(args.storage_options)
    with cluster(args) as client:
        if client is None:
            loader = vio.loader(cache=1, storage_options=storage)
            for source, output in zip(args.input, outputs):
                copy_images(loader, source, output, args.data_type, args.force, mode, prepare)
        else:
            for output in outputs:
                check_output(output, args.force)
            jobs = [
                (
                    source if isinstance(source, str) else Path(os.path.abspath(source)),
                    Path(os.path.abspath(output)),
                    args.data_type,
                    mode,
                    prepare,
                    storage,
                )
                for source, output in zip(args.input, outputs)
            ]
            run_per_file(client, _convert_file, jobs, outputs, "convert")
    for output in outputs:
        print(f"wrote {output}: {describe_briefly(vio.query_descriptor(output))}")
