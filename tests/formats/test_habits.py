"""Files as programs commonly leave them: TIFF stacks written a page at a time, headers that warn once."""

from __future__ import annotations

import warnings

import mrcfile
import numpy as np
import pytest
import tifffile

import vitrio as vio


@pytest.fixture
def pages():
    return np.arange(4 * 6 * 5, dtype=np.uint16).reshape(4, 6, 5)


def _appended(path, pages, **options) -> None:
    for page in pages:
        tifffile.imwrite(path, page, append=True, **options)


def _written_a_page_at_a_time(path, pages, **options) -> None:
    with tifffile.TiffWriter(path) as tiff:
        for page in pages:
            tiff.write(page, contiguous=False, **options)


@pytest.mark.parametrize("write", [_appended, _written_a_page_at_a_time])
@pytest.mark.parametrize("options", [{}, {"compression": "zlib"}])
def test_a_tiff_stack_written_page_by_page_reads_as_one_stack(tmp_path, pages, write, options):
    path = tmp_path / "movie.tif"
    write(path, pages, **options)
    with tifffile.TiffFile(path) as tiff:
        assert len(tiff.series) == len(pages)  # tifffile sees a series per page
    assert vio.query_descriptor(path) == vio.ImageDescriptor((4, 6, 5), 2, "uint16")
    np.testing.assert_array_equal(vio.read(path), pages)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(path, 2)), pages[2])
    out = np.zeros((2, 6, 5), np.float32)
    vio.read_batch_async(vio.loader(workers=2), out, [vio.ImageLocation(path, i) for i in (3, 1)]).get()
    np.testing.assert_array_equal(out, pages[[3, 1]])
    with pytest.raises(IndexError, match="stack of 4"):
        vio.read(vio.ImageLocation(path, 4))


def test_pages_of_different_shapes_are_not_one_stack(tmp_path, pages):
    path = tmp_path / "mixed.tif"
    tifffile.imwrite(path, pages[0], append=True)
    tifffile.imwrite(path, pages[0, :3], append=True)
    assert vio.query_descriptor(path) == vio.ImageDescriptor((6, 5), 2, "uint16")  # the first series


def test_a_header_that_breaks_the_rules_warns_once_per_file(tmp_path):
    paths = [tmp_path / "a.mrc", tmp_path / "b.mrc"]
    for path in paths:
        with mrcfile.new(str(path)) as mrc:
            mrc.set_data(np.zeros((4, 5), np.float32))
        with open(path, "r+b") as file:  # as some old writers leave it: no machine stamp
            file.seek(212)
            file.write(b"\x00\x00\x00\x00")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for path in paths:
                vio.read(path)
                vio.query_descriptor(path)
    messages = [str(w.message) for w in caught if issubclass(w.category, vio.FormatWarning)]
    assert len(messages) == 2 and "a.mrc" in messages[0] and "b.mrc" in messages[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", vio.FormatWarning)
        vio.read(paths[0])  # warned already: no error


def test_a_header_warning_made_an_error_raises_every_time(tmp_path):
    path = tmp_path / "c.mrc"
    with mrcfile.new(str(path)) as mrc:
        mrc.set_data(np.zeros((4, 5), np.float32))
    with open(path, "r+b") as file:
        file.seek(208)
        file.write(b"\x00\x00\x00\x00")  # no MAP field
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("error", vio.FormatWarning)
            with pytest.raises(vio.FormatWarning, match="c.mrc"):
                vio.read(path)
