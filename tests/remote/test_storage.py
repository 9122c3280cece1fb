"""`vitrio._storage.Storage`: where bytes come from, given once and carried whole, its options never shown."""

from __future__ import annotations

import os
import pickle

import pytest

import vitrio as vio
from vitrio._config import configuration
from vitrio._storage import LocalFile, Storage

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def test_a_storage_travels_whole_by_pickle_without_its_secrets_in_clear():
    storage = Storage({"key": "AKIDEXAMPLE", "secret": SECRET}, configuration().replace(remote_attempts=2))
    pickled = pickle.dumps(storage)
    assert SECRET.encode() not in pickled and b"AKIDEXAMPLE" not in pickled
    received = pickle.loads(pickled)
    assert dict(received.options) == {"key": "AKIDEXAMPLE", "secret": SECRET}
    assert received.configuration.remote_attempts == 2
    assert received == storage and received.digest() == storage.digest()


def test_neither_repr_nor_digest_shows_the_options():
    storage = Storage({"secret": SECRET})
    assert SECRET not in repr(storage) and SECRET not in storage.digest()
    assert storage.digest() != Storage({"secret": "another"}).digest()


def test_storage_of_a_storage_is_it_and_of_a_mapping_or_none_a_new_one():
    storage = Storage({"anon": True})
    assert Storage.of(storage) is storage
    assert dict(Storage.of({"anon": True}).options) == {"anon": True}
    assert dict(Storage.of(None).options) == {}


def test_the_options_cannot_be_changed_through_the_storage():
    with pytest.raises(TypeError):
        Storage({"anon": True}).options["anon"] = False  # type: ignore[index]


@pytest.mark.parametrize("given", ["{anon: true}", '{"anon": true}', [("anon", True)]])
def test_storage_options_not_a_mapping_is_one_type_error_that_shows_one(given):
    with pytest.raises(
        TypeError, match=r'storage_options is a mapping such as \{"anon": True\}, not a'
    ) as raised:
        Storage.of(given)
    assert raised.value.__cause__ is None


def test_a_local_key_opens_as_a_local_file_and_reads_as_a_file_does(tmp_path):
    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(256)))
    storage = Storage()
    assert not storage.is_remote(str(path)) and storage.is_remote("s3://bucket/x.mrc")
    with storage.open(str(path)) as source:
        assert isinstance(source, LocalFile) and source.size == 256
        assert source.pread(4, 254) == bytes([254, 255])
        assert [bytes(b) for b in source.read_ranges([(0, 2), (10, 12)])] == [b"\x00\x01", b"\x0a\x0b"]
        assert os.fstat(source.fileno()).st_size == 256
        assert source.open_blocks().read(3) == b"\x00\x01\x02"
        stamp = source.stamp()
        path.write_bytes(bytes(300))
        assert source.stamp() != stamp
        assert [bytes(b) for b in storage.read_many([(source, [(1, 3)])])[0]] == [b"\x00\x00"]
    with storage.local_copy(str(path), 10) as local:
        assert local == str(path)


def test_a_local_file_closed_is_not_read(tmp_path):
    path = tmp_path / "bytes.bin"
    path.write_bytes(b"abc")
    source = Storage().open(str(path))
    source.close()
    source.close()
    with pytest.raises(ValueError, match="bytes.bin: read after it was closed"):
        source.pread(1, 0)


def test_nothing_at_a_local_key_is_image_file_not_found(tmp_path):
    with pytest.raises(vio.ImageFileNotFoundError, match="missing.mrc: no such file"):
        Storage().open(str(tmp_path / "missing.mrc"))


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    path = tmp_path / "pipe.mrc"
    os.mkfifo(path)
    with pytest.raises(OSError, match="not a regular file"):
        Storage().open(str(path))
