"""A provider tells a file it has not opened (its layout unknown: None) from one it opened that holds no
layout (`NO_LAYOUT`: read through its reader), so that nothing opens a file again to learn what is known."""

from __future__ import annotations

import numpy as np
import tifffile

import vitrio as vio
from vitrio._providers import NO_LAYOUT
from vitrio.data._prepared_scratch import PreparedFiles
from vitrio.scratch.provider import hint


class CountingFiles(vio.FileImageReaderProvider):
    """Opens files as the file provider does, counting the readers it hands out."""

    def __init__(self):
        super().__init__()
        self.acquired = 0

    def acquire(self, key):
        self.acquired += 1
        return super().acquire(key)


def test_a_file_with_no_layout_is_told_from_one_not_opened(tmp_path):
    values = np.arange(3 * 8 * 6, dtype=np.uint16).reshape(3, 8, 6)
    compressed, raw = str(tmp_path / "c.tif"), str(tmp_path / "s.mrcs")
    tifffile.imwrite(compressed, values, compression="zlib", photometric="minisblack")
    vio.write_stack(values, raw)
    files = CountingFiles()
    assert files.layout(compressed) is None and files.layout(raw) is None
    for key in (compressed, raw):
        files.release(files.acquire(key))
    assert files.layout(compressed) is NO_LAYOUT
    assert files.layout(raw).key == raw and files.layout(raw).image_count == 3
    opened = files.acquired
    hint(files, compressed, np.arange(3))  # known to be read through its reader: nothing to hint, nor open
    hint(files, raw, np.arange(3))
    assert files.acquired == opened


def test_prepared_files_say_a_file_they_opened_holds_no_layout(tmp_path):
    values = np.arange(3 * 8 * 6, dtype=np.float32).reshape(3, 8, 6)
    raw = str(tmp_path / "s.mrcs")
    vio.write_stack(values, raw)
    image = (8, 6), np.dtype(np.float32)
    files = PreparedFiles(
        vio.FileImageReaderProvider(), lambda images: images, (8, 6), image[1], image, False
    )
    assert files.layout(raw) is None
    files.release(files.acquire(raw))
    assert files.layout(raw) is NO_LAYOUT  # a raw file, whose images are prepared: read through the reader
