"""Types of `vitrio._native`, the C extension (its files in src/vitrio/native_src say what each does)."""

from typing import type_check_only

from typing_extensions import Buffer

# Kinds of values of read_runs, convert and crop; a stored kind may carry SWAP (the other byte order).
KIND_U8: int
KIND_I8: int
KIND_U16: int
KIND_I16: int
KIND_F16: int
KIND_F32: int
KIND_BYTES: int
KIND_BF16: int
SWAP: int

# Kinds of render's out.
RENDER_U8: int
RENDER_U16: int
RENDER_U32: int
RENDER_F32: int

# The errors of a bad strip, as render and events report them.
EER_TRUNCATED: int
EER_PAST_END: int
EER_FULL: int

# The statuses of a run that read_runs could not read.
READ_OPEN: int
READ_CHANGED: int
READ_ERROR: int
READ_SHORT: int

# The fields of a row of runs and of a check row, and how many a row has.
RUN_FILE: int
RUN_OFFSET: int
RUN_COUNT: int
RUN_DESTINATION: int
RUN_FIELDS: int
CHECK_SIZE: int
CHECK_MTIME: int
CHECK_INODE: int
CHECK_DEVICE: int
CHECK_KIND: int
CHECK_FIELDS: int

Code = tuple[int, int, int, int, int]
"""(height, width, rlebits, hbits, vbits) of EER frames."""

@type_check_only
class FileMap(Buffer):  # what map_file returns; the module does not name it
    @property
    def faults(self) -> int: ...
    @property
    def guarded(self) -> bool: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

def render(
    data: Buffer,
    strips: Buffer,
    out: Buffer,
    kind: int,
    clear: bool,
    code: Code,
    shifts: tuple[int, int],
    out_shape: tuple[int, int],
    gain: Buffer | None,
    gain_shape: tuple[int, int],
    gain_shifts: tuple[int, int],
    /,
) -> tuple[int, int] | None: ...
def events(
    data: Buffer, strips: Buffer, positions: Buffer, counts: Buffer, code: Code, /
) -> tuple[int, int] | None: ...
def lzw_check(data: Buffer, size: int, /) -> int | None: ...
def map_file(fd: int, length: int, random: bool = False, /) -> FileMap: ...
def advise_map(map: FileMap, ranges: Buffer, done: bool = False, /) -> None: ...
def advise_maps(maps: tuple[FileMap | None, ...], ranges: Buffer, /) -> None: ...
def read_runs(
    paths: tuple[bytes, ...],
    checks: Buffer,
    runs: Buffer,
    out: Buffer,
    dst_kind: int,
    maps: tuple[Buffer | None, ...] | None = None,
    /,
) -> tuple[int, int, int, int] | None: ...
def advise(paths: tuple[bytes, ...], checks: Buffer, runs: Buffer, /) -> None: ...
def convert(src: Buffer, src_kind: int, out: Buffer, dst_kind: int, /) -> None: ...
def crop(
    src: Buffer,
    offset: int,
    src_kind: int,
    extents: tuple[int, ...],
    origins: Buffer,
    slots: Buffer,
    out: Buffer,
    dst_kind: int,
    patch: tuple[int, ...],
    fill: bytes | None,
    /,
) -> None: ...
def simd(enabled: bool, /) -> bool: ...
def star_read(
    text: Buffer, start: int, kinds: bytes, outs: tuple[Buffer, ...], /
) -> tuple[int, int, int, bytes, bool, list[list[tuple[int, Buffer, Buffer]]]] | None: ...
def split_image_names(
    offsets: Buffer, data: Buffer, indices: Buffer, codes: Buffer, /
) -> list[str] | None: ...
def lz4_decode(block: Buffer, out: Buffer, /) -> None: ...
def standardize(src: Buffer, out: Buffer, rows: int, /) -> None: ...
