"""Decompression bombs: small files whose headers or data would make a reader allocate gigabytes.

Each bomb is read in a subprocess under a limit of its address space
(`RLIMIT_AS`, what it has after importing vitrio plus 512 MiB) and a
timeout: it must be refused with `FormatError` naming the file within
seconds, or read with the memory the data justifies.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import imagecodecs
import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio.formats import FormatError
from vitrio.formats.tiff import TiffFormat
from vitrio.testing.eer import write_eer

pytestmark = pytest.mark.timeout(300)

ZSTD, DEFLATE, LZW = 50000, 8, 5
GIB = 1 << 30


def write_tiff(
    path: Path, height: int, width: int, segments: list[bytes], compression: int, tile=None
) -> Path:
    """A little-endian classic TIFF of one uint16 page of `height` x `width`, its data `segments` as given.

    One strip per segment (rows split evenly), or tiles of `tile` = (length, width).
    """
    data_at = 8
    offsets, at = [], data_at
    for segment in segments:
        offsets.append(at)
        at += len(segment)
    arrays_at = at
    count = len(segments)
    if tile is None:
        layout = [(273, 4, count, offsets), (278, 4, 1, [-(-height // count)]), (279, 4, count, None)]
    else:
        layout = [
            (322, 4, 1, [tile[1]]),
            (323, 4, 1, [tile[0]]),
            (324, 4, count, offsets),
            (325, 4, count, None),
        ]
    byte_counts = [len(segment) for segment in segments]
    tags = [(256, 4, 1, [width]), (257, 4, 1, [height]), (258, 3, 1, [16]), (259, 3, 1, [compression])]
    tags += [(262, 3, 1, [1]), (277, 3, 1, [1]), (284, 3, 1, [1]), (339, 3, 1, [1])]
    tags += [(tag, kind, n, byte_counts if values is None else values) for tag, kind, n, values in layout]
    tags.sort()
    extra = b""
    entries = []
    for tag, kind, n, values in tags:
        packed = struct.pack(f"<{n}{'H' if kind == 3 else 'I'}", *values)
        if len(packed) <= 4:
            entries.append(struct.pack("<HHI", tag, kind, n) + packed.ljust(4, b"\0"))
        else:
            entries.append(struct.pack("<HHII", tag, kind, n, arrays_at + len(extra)))
            extra += packed
    ifd_at = arrays_at + len(extra)
    ifd = struct.pack("<H", len(entries)) + b"".join(entries) + struct.pack("<I", 0)
    path.write_bytes(b"II*\0" + struct.pack("<I", ifd_at) + b"".join(segments) + extra + ifd)
    return path


def zeros_zstd(nbytes: int, frames: int) -> bytes:
    """A zstd stream of `frames` frames that decodes to `frames * nbytes` zero bytes."""
    return imagecodecs.zstd_encode(np.zeros(nbytes, np.uint8)) * frames


def run_limited(body: str, headroom: int) -> tuple[str, float]:
    """Run `body` in a fresh interpreter whose address space may grow `headroom` bytes past its size
    after start: what it printed, and in how long."""
    script = textwrap.dedent(
        f"""
        import resource
        with open("/proc/self/status") as status:
            size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + {headroom}, size + {headroom}))
        """
    ) + textwrap.dedent(body)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    return result.stdout.strip(), elapsed


def read_patch_limited(path: Path) -> tuple[str, float]:
    """Read a 64 x 64 patch of `path` with 512 MiB to spare: what happened, and in how long."""
    body = f"""
        import numpy as np
        import vitrio as vio
        out = np.zeros((1, 64, 64), np.float32)
        try:
            vio.read_patches_async(vio.loader(workers=1), out, {str(path)!r}, [[100, 100]]).get()
        except vio.FormatError as error:
            print("FormatError", error)
        except MemoryError as error:
            print("MemoryError", error)
        else:
            print("read")
        """
    return run_limited(body, 512 << 20)


@pytest.mark.parametrize("compression", [ZSTD, DEFLATE, LZW])
def test_a_small_tiff_whose_page_decodes_to_4_gib_is_refused_in_seconds(tmp_path, compression):
    """LZW and Deflate cannot make 4 GiB of so few bytes (4096 and 2048 to 1 at most): the page is
    refused before it is decoded. Zstd can, past the bound of other compressions (1024 to 1)."""
    height, width = 32768, 65536  # uint16: 4 GiB
    if compression == ZSTD:
        data = zeros_zstd(64 << 20, 64)  # decodes to 4 GiB of zeros
    elif compression == LZW:
        data = imagecodecs.lzw_encode(np.zeros(64 << 20, np.uint8))  # 64 MiB, claimed 4 GiB
    else:
        data = imagecodecs.zlib_encode(np.zeros(64 << 20, np.uint8), level=9)  # 64 MiB, claimed 4 GiB
    path = write_tiff(tmp_path / "bomb.tif", height, width, [data], compression)
    assert path.stat().st_size < 256 << 10
    outcome, seconds = read_patch_limited(path)
    assert outcome.startswith(f"FormatError {path}: page 0 of shape (32768, 65536)"), outcome
    assert "decompression bomb" in outcome and seconds < 30


def test_a_tile_larger_than_its_page_is_refused(tmp_path):
    tile = imagecodecs.zstd_encode(np.zeros(16 << 20, np.uint8))
    path = write_tiff(tmp_path / "tile.tif", 64, 64, [tile], ZSTD, tile=(4096, 2048))
    with pytest.raises(
        FormatError, match=rf"{path}: page 0 of shape \(64, 64\) needs 8192 bytes.*\(4096, 2048\)"
    ):
        vio.read(path)


def test_a_file_that_compresses_better_is_read_with_a_larger_max_expansion(tmp_path):
    path = tmp_path / "zeros.tif"
    tifffile.imwrite(path, np.zeros((2048, 2048), np.uint16), compression="zstd")
    with pytest.raises(FormatError, match=rf"{path}: page 0 .*more than 1024 times"):
        vio.read(path)

    class Generous(TiffFormat):
        max_expansion = 1 << 16

    image = vio.read(path, readers=vio.reader_provider(formats=[Generous]))
    assert image.shape == (2048, 2048) and not image.any()


@pytest.mark.parametrize("tile", [None, (32, 48)])
def test_a_patch_decodes_only_the_strips_or_tiles_it_touches(tmp_path, tile):
    image = np.arange(128 * 96, dtype=np.uint16).reshape(128, 96)
    path = tmp_path / "image.tif"
    tifffile.imwrite(path, image, compression="zstd", tile=tile, rowsperstrip=None if tile else 32)
    with tifffile.TiffFile(path) as tiff:
        page = tiff.pages[0]
        segments = list(zip(page.dataoffsets, page.databytecounts))
    centre = (40, 30)  # a 5 x 5 patch: rows 38..42 and columns 28..32, in the second strip or tile row
    touched = 1 if tile is None else 2  # strip 1, or tile (1, 0) of 2 a row
    with open(path, "r+b") as file:  # every other part is garbage
        for number, (offset, count) in enumerate(segments):
            if number != touched:
                file.seek(offset)
                file.write(b"\xff" * count)
    out = np.zeros((1, 5, 5), np.uint16)
    vio.read_patches_async(vio.loader(workers=1), out, path, [centre]).get()
    np.testing.assert_array_equal(out[0], image[38:43, 28:33])
    with pytest.raises(FormatError, match=f"{path}: page 0 cannot be read"):
        vio.read(path)


@pytest.mark.parametrize("tile", [None, (16, 32)])
def test_patches_of_compressed_pages_equal_the_image(tmp_path, tile):
    rng = np.random.default_rng(5)
    image = rng.integers(0, 1000, size=(70, 90), dtype=np.uint16)
    path = tmp_path / "image.tif"
    tifffile.imwrite(
        path, image, compression="zlib", predictor=True, tile=tile, rowsperstrip=None if tile else 9
    )
    centres = np.array([[0, 0], [35, 45], [69, 89], [10, 80], [68, 3], [20, 20]])
    out = np.full((len(centres), 11, 13), 7, np.int32)
    vio.read_patches_async(vio.loader(workers=2), out, path, centres).get()
    padded = np.full((70 + 20, 90 + 24), 7, np.int32)
    padded[10:80, 12:102] = image
    for patch, (y, x) in zip(out, centres):
        np.testing.assert_array_equal(patch, padded[y + 5 : y + 16, x + 6 : x + 19])


def test_read_events_reserves_what_the_frames_can_hold(tmp_path):
    """Frames of 8 x 8 pixels in 1-bit codes, each a strip of 1 MiB: a strip of zeros is 64 events
    and then bits the frame has no room for. Reserving 8 events a byte would take 512 MiB."""
    frames = [[bytes(1 << 20)] for _ in range(8)]
    path = write_eer(tmp_path / "dense.eer", frames, (8, 8), 65002, (1, 0, 0))
    body = f"""
        import vitrio as vio
        timeline = vio.read_events({str(path)!r})
        print(timeline.group_count, timeline.event_count)
        """
    printed, _ = run_limited(body, 256 << 20)
    assert printed.split() == ["8", str(8 * 64)]
