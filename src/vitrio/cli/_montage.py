"""`vitrio montage`: a picture of image files, a grid of tiles with a label under each.

Stacks, micrographs and movies give an image a tile (the first `--count`,
every `--every`-th, or the `--indices` named), labelled as RELION names
images (`n@file`, counting from one); a STAR file of particles gives the
particles it names, labelled with the values of some columns, one a line.
A volume gives its three central sections (XY, XZ, YZ) side by side or
`--sections N` evenly spaced XY sections, its voxel size in the label and a
scale bar where the header knows it; an EER movie the sum of its first
fraction and of all its frames.

The images are read through the batched core: all the 2-D images of one
shape in one `read_batch_async` (in chunks of bounded memory), a volume's
sections as patches, never the whole volume. Each tile is its image fitted
into the tile by a whole factor (`fit_image`), its contrast set by
percentiles of the fitted image, so that a tile is exactly what
`tile_values` makes of it. The labels are drawn by Pillow in matplotlib's
DejaVu Sans (both come with the cli extra), and the PNG is greyscale.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import vitrio as vio
from vitrio.bench.montage import label_font, labelled
from vitrio.formats import new_file, open_reader

from ._common import (
    CliError,
    add_force,
    add_storage_options,
    add_threads,
    check_output,
    file_or_url,
    folders_for,
    positive,
)

__all__ = [
    "DESCRIPTION",
    "HELP",
    "Tile",
    "add_arguments",
    "default_columns",
    "fit_image",
    "origin",
    "plan",
    "read_tiles",
    "render",
    "run",
    "tile_values",
]

LINE_HEIGHT = 12  # pixels of a line of a label
LABEL_MARGIN = 4  # pixels of the label's strip beside its lines
GAP = 4  # pixels between cells
BACKGROUND = 24  # the grey of the canvas around the tiles


@dataclass
class Tile:
    """One tile of the montage: what to read for it, and what it shows once read.

    Attributes:
        label: The text under the tile: what it shows, and on a second line (after a newline) which
            part of it, for sections and EER sums.
        key: The file.
        index: The image in its stack, or -1 for the whole file.
        kind: "image" (a 2-D image), "section" (a patch of a volume), or "eer" (EER fractions).
        patch: Of a section, the shape of the patch (depth, height, width, one of them 1).
        centre: Of a section, the centre of the patch in the volume.
        fractions: Of an EER tile, how many fractions the movie is cut into (1: all its frames).
        scale: Of a section, the voxel size in Å where it is known: a scale bar is drawn.
        pixels: The image, once read, fitted into the tile by `fit_image` (float32).
        step: How many pixels of the image one pixel of the tile spans.
    """

    label: str
    key: str
    index: int = -1
    kind: str = "image"
    patch: tuple[int, ...] = ()
    centre: tuple[int, ...] = ()
    fractions: int = 1
    scale: float | None = None
    pixels: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    step: float = 1.0


HELP = "a picture of image files: a grid of labelled tiles"
DESCRIPTION = (
    "Draw a grid of images from stacks, micrographs or movies (labelled n@file), the "
    "particles a STAR file names, the central sections of volumes (XY, XZ, YZ, with a scale bar where "
    "the voxel size is known), or the sum of an EER movie's first fraction and of all its frames, each "
    "tile's contrast set by percentiles of its own values. Writes a PNG."
)


def _indices(text: str) -> list[int]:
    """A `--indices` argument: indices counting from zero, separated by commas."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = [-1]
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"not indices from zero separated by commas: {text!r}")
    return values


def _percentiles(text: str) -> tuple[float, float]:
    """A `--clip` argument: two percentiles `low,high`, 0 <= low < high <= 100."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        low = high = -1.0
    if not 0 <= low < high <= 100:
        raise argparse.ArgumentTypeError(f"not two percentiles low,high from 0 to 100: {text!r}")
    return low, high


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vitrio montage`."""
    parser.add_argument(
        "files", nargs="*", type=file_or_url, metavar="FILE", help="image files of any format (or URLs)"
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="the PNG to write")
    parser.add_argument(
        "--star", type=file_or_url, help="a STAR file of particles (or its URL): their images are shown"
    )
    parser.add_argument(
        "--label",
        metavar="COLUMN[,COLUMN...]",
        type=lambda text: text.split(","),
        help="with --star: the columns whose values label tiles, one a line",
    )
    parser.add_argument("--root", type=Path, help="with --star: the project or data directory")
    parser.add_argument(
        "-n", "--count", type=positive, default=64, help="the most tiles in all (default: 64)"
    )
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--every", type=positive, default=1, metavar="K", help="every K-th image of a stack")
    chosen.add_argument(
        "--indices", type=_indices, metavar="I,J,...", help="these images of each stack (or rows of --star)"
    )
    parser.add_argument(
        "--clip",
        type=_percentiles,
        default=(1.0, 99.0),
        metavar="LOW,HIGH",
        help="the percentiles of each tile shown black and white (default: 1,99)",
    )
    parser.add_argument(
        "--sections", type=positive, metavar="N", help="N evenly spaced XY sections of a volume"
    )
    parser.add_argument(
        "--fractions", type=positive, default=10, help="an EER movie's fractions; the first is shown"
    )
    parser.add_argument("--tile", type=positive, default=128, help="the side of a tile in pixels")
    parser.add_argument("--columns", type=positive, help="tiles in a row (default: a square grid)")
    add_threads(parser, "threads that read")
    add_storage_options(parser)
    add_force(parser)


def _selected(count: int, args: argparse.Namespace, where: str) -> list[int]:
    """The indices of `count` images that `--indices` or `--every` choose."""
    if args.indices is not None:
        past = [i for i in args.indices if i >= count]
        if past:
            raise CliError(f"{where}: index {past[0]} is past the end ({count} images)")
        return list(args.indices)
    return list(range(0, count, args.every))


def _nice_length(most: float) -> float:
    """The largest of 1, 2, 5 times a power of ten that is at most `most` (> 0)."""
    power = 10.0 ** math.floor(math.log10(most))
    return max(step * power for step in (1, 2, 5) if step * power <= most)


def _length_text(angstroms: float) -> str:
    """A length in words: "20 nm", or "5 Å" under a nanometre."""
    return f"{angstroms / 10:g} nm" if angstroms >= 10 else f"{angstroms:g} Å"


def _file_tiles(path: Path | str, args: argparse.Namespace) -> list[Tile]:
    """The tiles of one file (or URL), from its header alone."""
    key = str(path)
    name = os.path.basename(key)
    with open_reader(key, vio.Storage.of(args.storage_options)) as reader:
        descriptor, voxel, format_name = reader.descriptor, reader.voxel_size, reader.format_name
    if format_name == "eer":
        frames = descriptor.image_count
        fractions = min(args.fractions, frames)
        return [
            Tile(
                f"{name}\n1st of {fractions} fractions",
                key,
                0 if fractions > 1 else -1,
                "eer",
                fractions=fractions,
            ),
            Tile(f"{name}\nsum of {frames} frames", key, -1, "eer", fractions=1),
        ]
    if descriptor.core_rank == 2:
        if not descriptor.is_stack:
            return [Tile(name, key, 0)]
        return [Tile(f"{i + 1}@{name}", key, i) for i in _selected(descriptor.image_count, args, key)]
    volumes = _selected(descriptor.image_count, args, key) if descriptor.is_stack else [-1]
    depth, height, width = descriptor.core_extents
    size = None if voxel is None else voxel[-1]
    where = f" {size:.3g} Å" if size is not None else ""
    if args.sections:
        planes = (
            np.arange(depth) if args.sections >= depth else np.linspace(0, depth - 1, args.sections + 2)[1:-1]
        )
        cuts = [
            (f"z={z}{where}", (1, height, width), (z, height // 2, width // 2))
            for z in planes.round().astype(int).tolist()
        ]
    else:
        middle = (depth // 2, height // 2, width // 2)
        cuts = [
            (f"XY{where}", (1, height, width), middle),
            ("XZ", (depth, 1, width), middle),
            ("YZ", (depth, height, 1), middle),
        ]
    tiles = []
    for volume in volumes:
        prefix = f"{volume + 1}@{name}" if volume >= 0 else name
        tiles += [
            Tile(f"{prefix}\n{cut}", key, volume, "section", patch, centre, scale=size)
            for cut, patch, centre in cuts
        ]
    return tiles


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _star_tiles(args: argparse.Namespace) -> tuple[list[Tile], int]:
    """The tiles of the first `--count` particles a STAR file names, labelled with `--label`'s columns
    (a line `COLUMN: value` each) or `n@file`, and how many particles it names."""
    particles = vio.data.read_particles(args.star, storage_options=args.storage_options)
    if particles.empty:
        raise CliError(f"{args.star}: lists no particles")
    for column in args.label or ():
        if column not in particles.columns:
            raise CliError(
                f"{args.star}: no column {column}; it has {', '.join(map(str, particles.columns))}"
            )
    rows = _selected(len(particles), args, str(args.star))
    chosen = particles.iloc[rows[: args.count]]
    locations = vio.data.particle_locations(
        chosen, args.star, root=args.root, storage_options=args.storage_options
    )
    if args.label is None:
        labels = [f"{loc.index_in_stack + 1}@{Path(loc.key).name}" for loc in locations]
    else:
        labels = [
            "\n".join(f"{column}: {_text(value)}" for column, value in zip(args.label, values))
            for values in zip(*(chosen[c] for c in args.label))
        ]
    return [Tile(label, loc.key, loc.index_in_stack) for label, loc in zip(labels, locations)], len(rows)


def plan(args: argparse.Namespace) -> tuple[list[Tile], int]:
    """The tiles `args` ask for, at most `args.count`, from the headers of the files, and how many
    images they ask for before that cut.

    Raises:
        CliError: If nothing is named, a STAR file lists no particles or the files hold no image, an
            index is past the end, or the label column is missing.
        FileNotFoundError, FormatError: If a file is missing or of no known format.
    """
    if not args.files and args.star is None:
        raise CliError("name image files, or a STAR file of particles with --star")
    tiles, total = _star_tiles(args) if args.star is not None else ([], 0)
    for path in args.files:
        found = _file_tiles(path, args)
        tiles += found
        total += len(found)
    if not tiles:
        raise CliError(f"{', '.join(map(str, args.files))}: hold no image to show")
    return tiles[: args.count], total


def fit_image(image: np.ndarray, tile: int) -> tuple[np.ndarray, float]:
    """`image` fitted into `tile` x `tile` by a whole factor: binned (the mean of each block) if larger,
    each pixel repeated if it fits twice or more.

    Rows and columns past the last whole block of a binned image are left out.

    Returns:
        The fitted image (float32), and how many pixels of `image` one of its pixels spans.
    """
    image = np.asarray(image, np.float32)
    factor = math.ceil(max(image.shape) / tile)
    if factor > 1:
        height, width = image.shape[0] // factor, image.shape[1] // factor
        blocks = image[: height * factor, : width * factor].reshape(height, factor, width, factor)
        return blocks.mean(axis=(1, 3), dtype=np.float64).astype(np.float32), float(factor)
    zoom = tile // max(image.shape)
    if zoom < 2:
        return image, 1.0
    return np.repeat(np.repeat(image, zoom, axis=0), zoom, axis=1), 1.0 / zoom


def tile_values(pixels: np.ndarray, clip: tuple[float, float]) -> np.ndarray:
    """The grey levels (uint8) of a tile: `pixels` mapped from their `clip` percentiles onto 0 to 255."""
    low, high = np.percentile(pixels, clip) if pixels.size else (0.0, 0.0)
    span = high - low
    if not span > 0:
        return np.full(pixels.shape, 128, np.uint8)
    return np.rint(np.clip((pixels - low) / span, 0.0, 1.0) * 255).astype(np.uint8)


def _readers(keys: list[str], options: Mapping | None) -> vio.ImageReaderProvider:
    """A provider that keeps the files at `keys` open while they are read, at most `montage_open_files`
    of the configuration in force."""
    kept = min(len(keys), vio.configuration().montage_open_files)
    return vio.reader_provider(cache=max(1, kept), storage_options=options)


def _read_images(tiles: list[Tile], executor: vio.Executor, tile: int, options: Mapping | None) -> None:
    """Read the 2-D images, those of one shape in one batch read (in chunks of bounded memory).

    Each file is opened once: its shape is asked of the readers the batch then reads through.
    """
    keys = list(dict.fromkeys(t.key for t in tiles))
    readers = _readers(keys, options)
    shapes = {key: readers.query_descriptor(key).core_extents for key in keys}
    loader = vio.ExecutorImageLoader(readers, executor)
    by_shape: dict[tuple[int, ...], list[Tile]] = {}
    for t in tiles:
        by_shape.setdefault(shapes[t.key], []).append(t)
    for shape, group in by_shape.items():
        chunk = max(1, vio.configuration().montage_read_bytes // (4 * math.prod(shape)))
        for start in range(0, len(group), chunk):
            part = group[start : start + chunk]
            batch = np.empty((len(part), *shape), np.float32)
            vio.read_batch_async(loader, batch, [vio.ImageLocation(t.key, t.index) for t in part]).get()
            for t, image in zip(part, batch):
                t.pixels, t.step = fit_image(image, tile)


def _read_sections(tiles: list[Tile], executor: vio.Executor, tile: int, options: Mapping | None) -> None:
    """Read each section as a patch of its volume: the volume itself is never read whole."""
    loader = vio.ExecutorImageLoader(_readers(list(dict.fromkeys(t.key for t in tiles)), options), executor)
    reads = []
    for t in tiles:
        out = np.zeros((1, *t.patch), np.float32)
        reads.append(
            (t, out, vio.read_patches_async(loader, out, vio.ImageLocation(t.key, t.index), [t.centre]))
        )
    for t, out, completion in reads:
        completion.get()
        # XY: height x width; XZ: depth x width; YZ: depth x height (depth runs down the tile)
        t.pixels, t.step = fit_image(out[0].reshape([n for n in t.patch if n != 1] or [1, 1]), tile)


def _read_eer(tiles: list[Tile], executor: vio.Executor, tile: int, options: Mapping | None) -> None:
    """Render each EER tile: the first of its fractions, or the sum of all frames."""
    for t in tiles:
        readers = vio.detector_event_image_reader_provider(t.fractions, storage_options=options)
        loader = vio.ExecutorImageLoader(readers, executor)
        shape = vio.query_descriptor(t.key, readers).core_extents
        out = np.empty((1, *shape), np.float32)
        vio.read_batch_async(loader, out, [vio.ImageLocation(t.key, t.index)]).get()
        t.pixels, t.step = fit_image(out[0], tile)


def read_tiles(
    tiles: list[Tile], tile: int, workers: int, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Read and bin the image of every tile, on `workers` threads; files at URLs reached with
    `storage_options`, as fsspec takes them."""
    executor = vio.ThreadPoolExecutor(workers)
    try:
        for read, kind in ((_read_images, "image"), (_read_sections, "section"), (_read_eer, "eer")):
            chosen = [t for t in tiles if t.kind == kind]
            if chosen:
                read(chosen, executor, tile, storage_options)
    finally:
        executor.shutdown()


def _scale_bar(canvas: np.ndarray, top: int, left: int, t: Tile) -> str:
    """Draw a scale bar in the bottom left of a section's tile; return its length in words."""
    height, width = t.pixels.shape
    angstroms_per_pixel = t.scale * t.step
    length = _nice_length(width * angstroms_per_pixel / 4)
    pixels = max(1, round(length / angstroms_per_pixel))
    thick = max(2, height // 40)
    row = top + height - 2 * thick
    canvas[row : row + thick, left + thick : left + thick + pixels] = 255
    return _length_text(length)


def origin(slot: int, columns: int, size: int, lines: int) -> tuple[int, int]:
    """The top left pixel of tile `slot` of a grid of `columns`, of cells of `size` and labels of `lines`."""
    row, column = divmod(slot, columns)
    return GAP + row * (size + lines * LINE_HEIGHT + LABEL_MARGIN + GAP), GAP + column * (size + GAP)


def default_columns(tiles: list[Tile]) -> int:
    """The columns of a square grid of `tiles`, three at least where they hold a volume's three
    orthogonal sections (XZ and YZ span its depth), which then sit side by side."""
    square = math.ceil(math.sqrt(len(tiles)))
    orthogonal = any(t.kind == "section" and t.patch[0] > 1 for t in tiles)
    return max(square, 3) if orthogonal else square


def render(
    tiles: list[Tile], clip: tuple[float, float], columns: int | None
) -> tuple[np.ndarray, list[tuple[float, float, str]], int]:
    """Lay the tiles out in a grid of square cells as large as the largest tile, each centred in its cell.

    Args:
        tiles: The tiles, read.
        clip: The percentiles of each tile's values that map onto black and white.
        columns: Tiles in a row; None for `default_columns`.

    Returns:
        The canvas (uint8, height x width), each label's centre (x, y in pixels from the top left) and
        text, and the size of a cell.
    """
    columns = columns or default_columns(tiles)
    rows = math.ceil(len(tiles) / columns)
    size = max(max(t.pixels.shape) for t in tiles)
    lines = max(t.label.count("\n") + 1 for t in tiles)
    height = origin(rows * columns, columns, size, lines)[0]
    canvas = np.full((height, columns * (size + GAP) + GAP), BACKGROUND, np.uint8)
    labels = []
    for slot, t in enumerate(tiles):
        top, left = origin(slot, columns, size, lines)
        rows_of, columns_of = t.pixels.shape
        top, left = top + (size - rows_of) // 2, left + (size - columns_of) // 2  # centred in its cell
        canvas[top : top + rows_of, left : left + columns_of] = tile_values(t.pixels, clip)
        text = t.label
        if t.scale is not None and t.kind == "section":
            text += f", bar {_scale_bar(canvas, top, left, t)}"
        below = origin(slot, columns, size, lines)[0] + size
        labels.append((left + columns_of / 2, below + (lines * LINE_HEIGHT + LABEL_MARGIN) / 2, text))
    return canvas, labels, size


def _save(
    canvas: np.ndarray, labels: list[tuple[float, float, str]], size: int, font: Any, path: Path
) -> None:
    """Write the canvas and its labels (`vitrio.bench.montage.labelled`) as a PNG at `path`."""
    image, info = labelled(canvas, labels, size + GAP, font)
    with folders_for(path), new_file(path) as partial, partial.file() as file:
        image.save(file, format="PNG", pnginfo=info)


def run(args: argparse.Namespace) -> None:
    """Plan the tiles, read them, and write the PNG; nothing is written if a file cannot be read."""
    font = label_font()  # without matplotlib or Pillow, the command stops before any work
    check_output(args.output, args.force)
    if args.output.suffix.lower() != ".png":
        raise CliError(f"{args.output}: the picture is a PNG; name it .png")
    tiles, total = plan(args)
    read_tiles(tiles, args.tile, args.threads, args.storage_options)
    canvas, labels, size = render(tiles, args.clip, args.columns)
    _save(canvas, labels, size, font, args.output)
    cut = f" (the first {len(tiles)} of {total}: -n {total} shows all)" if total > len(tiles) else ""
    print(f"{args.output}: {len(tiles)} tiles{cut}, {canvas.shape[1]} x {canvas.shape[0]} pixels")
