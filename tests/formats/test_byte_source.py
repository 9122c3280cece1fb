"""Formats read a file's bytes through the `ByteSource` the storage opens, local or at a URL alike; the
reader owns it, and an open that fails lets it go."""

from __future__ import annotations

import os

import fsspec
import numpy as np
import pytest

import vitrio as vio
from vitrio._config import configuration
from vitrio._storage import Storage
from vitrio.formats import ByteSource, Format, FormatError, ImageReader, MrcFormat, open_reader
from vitrio.formats._remote_readers import RemoteReaders


class _Bytes(ImageReader):
    """A file's bytes as one image of uint8, read through its source alone."""

    def __init__(self, key: str, source: ByteSource):
        super().__init__(key, vio.ImageDescriptor((source.size,), 1, vio.NumericalType.uint8))
        self.source = source

    def read_run(self, start: int, outs) -> None:
        self.check_run(start, len(outs))
        outs[0][...] = np.frombuffer(self.source.pread(self.source.size, 0), np.uint8)

    def read_region(self, index, region, out) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.source.close()


class BytesFormat(Format):
    name = "bytes"
    read_extensions = (".bytes",)
    reads_urls = True
    given: list[ByteSource] = []

    @classmethod
    def open(cls, key: str, source: ByteSource, head: bytes) -> ImageReader:
        cls.given.append(source)
        if head.startswith(b"bad"):
            raise FormatError(f"{key}: bad")
        return _Bytes(key, source)


@pytest.fixture
def bytes_format():
    BytesFormat.given = []
    return BytesFormat


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_local_file_is_read_through_a_source_with_a_descriptor_the_reader_closes(tmp_path, bytes_format):
    path = tmp_path / "a.bytes"
    path.write_bytes(b"local bytes")
    before = _descriptors()
    reader = open_reader(path, formats=[bytes_format])
    (source,) = bytes_format.given
    assert source.key == str(path) and isinstance(source.fileno(), int) and source.size == 11
    out = np.zeros(11, np.uint8)
    reader.read_run(0, [out])
    assert out.tobytes() == b"local bytes"
    reader.close()
    assert _descriptors() == before


def test_a_file_at_a_url_is_read_through_a_source_without_a_descriptor(bytes_format):
    fsspec.filesystem("memory").pipe("/sources/a.bytes", b"remote bytes")
    with open_reader("memory://sources/a.bytes", Storage(), [bytes_format]) as reader:
        (source,) = bytes_format.given
        assert source.fileno() is None and source.size == 12
        assert bytes(source.read_ranges([(0, 6)])[0]) == b"remote"
        out = np.zeros(12, np.uint8)
        reader.read_run(0, [out])
    assert out.tobytes() == b"remote bytes"


def test_an_open_that_fails_lets_the_source_go(tmp_path, bytes_format):
    path = tmp_path / "b.bytes"
    path.write_bytes(b"bad bytes")
    before = _descriptors()
    with pytest.raises(FormatError, match="b.bytes: bad"):
        open_reader(path, formats=[bytes_format])
    assert _descriptors() == before
    with pytest.raises(ValueError, match="read after it was closed"):
        bytes_format.given[0].pread(1, 0)


def test_an_mrc_file_reads_alike_from_a_path_and_a_url(tmp_path):
    values = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    path = tmp_path / "stack.mrcs"
    vio.write_stack(values, path)
    fsspec.filesystem("memory").pipe("/sources/stack.mrcs", path.read_bytes())
    for key in (str(path), "memory://sources/stack.mrcs"):
        with open_reader(key, Storage(), [MrcFormat]) as reader:
            out = np.zeros((2, 3, 4), np.float32)
            reader.read_images(np.arange(2), out, np.arange(2))
            np.testing.assert_array_equal(out, values)


def test_formats_may_still_come_second_and_the_options_as_storage_options(tmp_path):
    path = tmp_path / "one.mrc"
    vio.write_single(np.ones((2, 2), np.float32), path)
    with open_reader(path, [MrcFormat]) as reader, open_reader(path, storage_options={}) as other:
        assert reader.format_name == other.format_name == "mrc"
    with pytest.raises(TypeError, match="give storage or storage_options, not both"):
        open_reader(path, Storage(), storage_options={})


def test_the_readers_of_files_at_urls_kept_are_as_many_as_the_configuration_says(tmp_path):
    path = tmp_path / "one.mrc"
    vio.write_single(np.ones((2, 2), np.float32), path)
    for name in ("a.mrc", "b.mrc"):
        fsspec.filesystem("memory").pipe(f"/kept/{name}", path.read_bytes())
    readers = RemoteReaders(Storage(configuration=configuration().replace(remote_readers_kept=1)))
    readers.acquire("memory://kept/a.mrc", [MrcFormat])
    assert readers.holds("memory://kept/a.mrc")
    readers.acquire("memory://kept/b.mrc", [MrcFormat])
    assert readers.holds("memory://kept/b.mrc") and not readers.holds("memory://kept/a.mrc")
