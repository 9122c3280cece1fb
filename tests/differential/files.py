"""Files drawn by Hypothesis, written byte by byte where vitrio must not be the writer, and the plain
reads of their bytes that every way of reading them is compared with.

An MRC file is written here from its header fields (any mode, byte order,
extended header, axis order and space group), and read back with
`np.fromfile` of its data block; a TIFF file is written and read back by
tifffile, the independent reader.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import mrcfile.dtypes
import numpy as np
import tifffile
from hypothesis import strategies as st

# Each MRC mode vitrio reads: the type stored, and the type it reads as.
MRC_MODES = {
    0: (np.int8, np.int8),
    1: (np.int16, np.int16),
    2: (np.float32, np.float32),
    3: (np.int16, np.complex64),  # a pair of int16 a value, real first
    4: (np.complex64, np.complex64),
    6: (np.uint16, np.uint16),
    12: (np.float16, np.float16),
}
# Each file a test writes gets a name of its own, so that no reader kept open sees another's bytes.
_NUMBERS = itertools.count()
AXIS_ORDERS = [(1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)]


@dataclass(frozen=True)
class Drawn:
    """A file written for a test, and what a plain read of its bytes holds.

    Attributes:
        path: Where it is.
        values: The whole file as vitrio reads it: `(n, *image)` for a stack, the image or volume otherwise.
        stack: Whether it is a stack (of images or volumes).
        layout: What was drawn, for the failure message.
    """

    path: Path
    values: np.ndarray
    stack: bool
    layout: str

    @property
    def images(self) -> np.ndarray:
        """One image (or volume) a slot: `values` of a stack, the file as one slot otherwise."""
        return self.values if self.stack else self.values[None]


def fresh(folder: Path, name: str) -> Path:
    """A path in `folder` no example has used: `name` with a number of its own before its suffix."""
    stem, dot, suffix = name.partition(".")
    return folder / f"{stem}-{next(_NUMBERS)}{dot}{suffix}"


def _stamp(order: str) -> bytes:
    return b"\x44\x44\x00\x00" if order == "<" else b"\x11\x11\x00\x00"


def write_mrc(path: Path, stored: np.ndarray, mode: int, order: str, axes, ispg: int, mz: int, extended: int):
    """Write `stored` (sections, rows, columns of the file's mode) as an MRC file of this header."""
    sections, rows, columns = stored.shape
    header = np.zeros((), dtype=mrcfile.dtypes.HEADER_DTYPE.newbyteorder(order))
    values = columns // 2 if mode == 3 else 2 * columns if mode == 101 else columns  # 101: two 4-bit a byte
    header["nx"], header["ny"], header["nz"] = values, rows, sections
    header["mode"] = mode
    header["mx"], header["my"], header["mz"] = header["nx"], rows, mz
    header["cella"] = (header["nx"], rows, mz)
    header["cellb"] = (90, 90, 90)
    header["mapc"], header["mapr"], header["maps"] = axes
    header["ispg"] = ispg
    header["nsymbt"] = extended
    header["nversion"] = 20141
    header["map"] = b"MAP "
    header["machst"] = np.frombuffer(_stamp(order), np.uint8)
    with open(path, "wb") as file:
        file.write(header.tobytes())
        file.write(bytes(range(256)) * (extended // 256) + bytes(extended % 256))
        file.write(stored.astype(stored.dtype.newbyteorder(order)).tobytes())


def plain_mrc(path: Path, mode: int) -> np.ndarray:
    """The data block of an MRC file, read by `np.fromfile` after its header as the header lays it out:
    (sections, rows, columns) of the mode's values."""
    header = np.fromfile(path, dtype=mrcfile.dtypes.HEADER_DTYPE, count=1)[0]
    order = "<" if bytes(header["machst"])[0] == 0x44 else ">"
    header = np.fromfile(path, dtype=mrcfile.dtypes.HEADER_DTYPE.newbyteorder(order), count=1)[0]
    stored, _ = MRC_MODES[mode]
    shape = (int(header["nz"]), int(header["ny"]), int(header["nx"]) * (2 if mode == 3 else 1))
    data = np.fromfile(path, dtype=np.dtype(stored).newbyteorder(order), offset=1024 + int(header["nsymbt"]))
    data = data[: int(np.prod(shape))].reshape(shape).astype(stored)
    if mode == 3:
        data = (data[..., 0::2] + 1j * data[..., 1::2].astype(np.float32)).astype(np.complex64)
    return data


def _values(draw, dtype, shape) -> np.ndarray:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "c":
        parts = rng.normal(scale=100, size=(2, *shape))
        return (parts[0] + 1j * parts[1]).astype(dtype)
    return rng.normal(scale=100, size=shape).astype(dtype)


@st.composite
def mrc_files(
    draw, folder: Path, kinds=("image", "stack", "volume", "volumes"), modes=tuple(MRC_MODES), shape=None
):
    """A `Drawn` MRC file: an image, a stack of images (`.mrcs` or `ispg` 0), a volume in any axis
    order, or a stack of volumes (`ispg` 401), of any mode and byte order, with or without an
    extended header; its images of `shape` (y, x) where given, and then a stack of two or more."""
    kind = draw(st.sampled_from(kinds))
    mode = draw(st.sampled_from(modes))
    order = draw(st.sampled_from("<>"))
    extended = draw(st.sampled_from([0, 0, 92, 1024 + 7]))
    y, x = shape or (draw(st.integers(1, 24)), draw(st.integers(1, 24)))
    axes, ispg, count = (1, 2, 3), 1, 1
    if kind == "image":
        core = (1, y, x)
    elif kind == "stack":
        count = draw(st.integers(2 if shape else 1, 7))
        core = (count, y, x)
        ispg = draw(st.sampled_from([0, 1]))  # a .mrcs is a stack whatever ispg says
    elif kind == "volume":
        core = (draw(st.integers(2, 8)), y, x)
        axes = draw(st.sampled_from(AXIS_ORDERS if mode != 3 else [(1, 2, 3)]))
    else:
        count, depth = draw(st.integers(1, 4)), draw(st.integers(1, 5))
        core = (count * depth, y, x)
        ispg = 401
    suffix = ".mrcs" if kind == "stack" and ispg == 1 else ".mrc"
    path = fresh(folder, f"{kind}-{mode}-{'le' if order == '<' else 'be'}{suffix}")
    stored_type, read_type = MRC_MODES[mode]
    # The volume as (z, y, x), stored with its columns, rows and sections along the axes `axes` name.
    volume = _values(draw, read_type if mode != 3 else np.int16, core if mode != 3 else (*core[:2], 2 * x))
    if mode == 3:
        stored = volume
    else:
        stored = np.ascontiguousarray(volume.transpose(*(3 - a for a in reversed(axes))))
    mz = core[0] // count if kind == "volumes" else core[0]
    write_mrc(path, stored.astype(stored_type), mode, order, axes, ispg, mz, extended)
    plain = plain_mrc(path, mode)
    # Back to (z, y, x): the stored axes are the sections, rows and columns, along the axes `axes` names.
    zyx = plain.transpose(*(list(reversed(axes)).index(a) for a in (3, 2, 1)))
    # `ispg` 0 with one section in a .mrc is one image (spec: a single image reads as 2-D).
    stack = kind == "volumes" or (kind == "stack" and (suffix == ".mrcs" or count > 1))
    if kind == "image" or (kind == "stack" and not stack):
        values = zyx[0]
    elif kind == "volumes":
        values = zyx.reshape(count, mz, *zyx.shape[1:])
    else:
        values = zyx
    layout = f"MRC {kind} mode {mode} {order} axes {axes} ispg {ispg} extended {extended} {values.shape}"
    return Drawn(path, np.ascontiguousarray(values), stack, layout)


TIFF_TYPES = [np.uint8, np.uint16, np.int16, np.float32, np.int32, np.float64, np.complex64]
REAL_TYPES = TIFF_TYPES[:-1]
# The modes and types whose every value float32 holds exactly, as `vitrio.data` and `extract` read them.
FLOAT32_MODES = (0, 1, 2, 6, 12)
FLOAT32_TYPES = [np.uint8, np.uint16, np.int16, np.float32]
TIFF_CODECS = [None, None, "zlib", "lzw", "zstd", "packbits", "deflate"]


@st.composite
def tiff_files(draw, folder: Path, shape=None, types=TIFF_TYPES, pages=(1, 5)):
    """A `Drawn` TIFF file: one page or a multi-page stack, in strips or tiles, compressed or not
    (with a predictor where the codec takes one), classic or BigTIFF, read back by tifffile; of
    `pages` (fewest, most) pages of `shape` (y, x) where given, of one of `types`."""
    count = draw(st.integers(*pages))
    y, x = shape or (draw(st.integers(1, 48)), draw(st.integers(1, 48)))
    dtype = np.dtype(draw(st.sampled_from(types)))
    codec = draw(st.sampled_from(TIFF_CODECS))
    if dtype.kind == "c" and codec == "packbits":
        codec = None
    options: dict = {"photometric": "minisblack", "bigtiff": draw(st.booleans())}
    if codec is not None:
        options["compression"] = codec
        if codec in ("zlib", "deflate", "zstd", "lzw") and dtype.kind in "iu" and draw(st.booleans()):
            options["predictor"] = True
    if draw(st.booleans()):
        options["tile"] = (draw(st.sampled_from([16, 32])), draw(st.sampled_from([16, 32])))
    else:
        options["rowsperstrip"] = draw(st.integers(1, y))
    values = _values(draw, dtype, (count, y, x))
    path = fresh(folder, "stack.tif")
    with tifffile.TiffWriter(path, bigtiff=options.pop("bigtiff")) as writer:
        for page in values:  # one page each, whatever tifffile would make of a shape
            writer.write(page, contiguous=False, **options)
    with tifffile.TiffFile(path) as tiff:
        plain = np.stack([page.asarray() for page in tiff.pages]).reshape(count, y, x)
    stack = count > 1
    layout = f"TIFF {count} x {y} x {x} {dtype} {options}"
    return Drawn(path, plain if stack else plain[0], stack, layout)


ZARR_TYPES = [np.uint8, np.int16, np.uint16, np.int32, np.float32, np.float64]


@st.composite
def zarr_stores(draw, folder: Path, chunks_across: int = 20):
    """A `Drawn` one-level OME-Zarr image or volume that zarr writes and reads back: Zarr v2 (NGFF 0.4)
    with zstd, blosc, gzip or no compressor, after shuffle or delta filters or none; or Zarr v3 (NGFF 0.5)
    with those compressors, a crc32c checksum or a transpose, in shards of chunks or not. Chunks of any
    shape, edge chunks included, up to `chunks_across` of them along each axis."""
    import numcodecs
    import zarr

    shape = tuple(draw(st.integers(1, 20)) for _ in range(draw(st.sampled_from([2, 3]))))
    dtype = np.dtype(draw(st.sampled_from(ZARR_TYPES)))
    chunks = tuple(draw(st.integers(-(-n // chunks_across), n + 2)) for n in shape)
    version = draw(st.sampled_from([2, 3]))
    codec = draw(st.sampled_from([None, "zstd", "blosc", "gzip"]))
    path = fresh(folder, "image.zarr")
    group = zarr.open_group(str(path), mode="w", zarr_format=version)
    options: dict = {}
    if version == 2:
        options["compressors"] = {
            None: None,
            "zstd": numcodecs.Zstd(level=1),
            "blosc": numcodecs.Blosc(cname="lz4", shuffle=draw(st.sampled_from([0, 1, 2]))),
            "gzip": numcodecs.GZip(level=1),
        }[codec]
        kind = draw(st.sampled_from([None, "shuffle", "delta"]))
        if kind is not None:
            options["filters"] = [
                numcodecs.Shuffle(dtype.itemsize) if kind == "shuffle" else numcodecs.Delta(dtype)
            ]
    else:
        codecs = zarr.codecs
        compressor = {
            None: None,
            "zstd": codecs.ZstdCodec(level=1),
            "blosc": codecs.BloscCodec(cname="lz4", shuffle=draw(st.sampled_from(["noshuffle", "shuffle"]))),
            "gzip": codecs.GzipCodec(level=1),
        }[codec]
        options["compressors"] = [
            c for c in (compressor, draw(st.sampled_from([None, codecs.Crc32cCodec()]))) if c
        ]
        if draw(st.booleans()):
            options["filters"] = [codecs.TransposeCodec(order=tuple(reversed(range(len(shape)))))]
        if draw(st.booleans()):
            options["shards"] = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    values = _values(draw, dtype, shape)
    group.create_array("0", shape=shape, dtype=dtype, chunks=chunks, fill_value=0, **options)[...] = values
    axes = [{"name": n, "type": "space"} for n in "zyx"[3 - len(shape) :]]
    multiscales = [{"version": "0.4", "axes": axes, "datasets": [{"path": "0"}]}]
    if version == 2:
        group.attrs["multiscales"] = multiscales
    else:
        group.attrs["ome"] = {"version": "0.5", "multiscales": multiscales}
    plain = zarr.open_array(str(path / "0"), mode="r")[...]
    layout = f"OME-Zarr v{version} {shape} {dtype} chunks {chunks} {options}"
    return Drawn(path, plain, False, layout)
