"""`vitrio._storage.Storage`: where bytes come from, given once and carried whole, its options never shown."""

from __future__ import annotations

import datetime
import os
import pickle
import socket
import sys
import time
import traceback

import pytest

import vitrio as vio
from vitrio._config import configuration
from vitrio._storage import LocalFile, Storage
from vitrio.data import read_particles

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def test_a_storage_travels_whole_by_pickle_without_its_secrets_in_clear():
    storage = Storage({"key": "AKIDEXAMPLE", "secret": SECRET}, configuration().replace(remote_attempts=2))
    pickled = pickle.dumps(storage)
    assert SECRET.encode() not in pickled and b"AKIDEXAMPLE" not in pickled
    received = pickle.loads(pickled)
    assert dict(received.options) == {"key": "AKIDEXAMPLE", "secret": SECRET}
    assert received.configuration.remote_attempts == 2
    assert received == storage and received.digest() == storage.digest()


def test_a_storage_of_options_json_cannot_hold_travels_with_them_as_they_are():
    timeout = datetime.timedelta(seconds=3)  # an object: it travels as the pickle holds it
    received = pickle.loads(pickle.dumps(Storage({"client_kwargs": {"timeout": timeout}})))
    assert received.options["client_kwargs"]["timeout"] == timeout


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


def _closed_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


@pytest.fixture
def unanswered_port():
    """A port whose socket listens, its queue of connections full, and never accepts: a connection to it
    is never made."""
    with socket.socket() as silent, socket.socket() as queued, socket.socket() as waiting:
        silent.bind(("127.0.0.1", 0))
        silent.listen(0)
        port = silent.getsockname()[1]
        queued.connect(("127.0.0.1", port))
        waiting.setblocking(False)
        waiting.connect_ex(("127.0.0.1", port))
        yield port


def _keys(port: int) -> list[tuple[str, dict]]:
    endpoint = f"http://127.0.0.1:{port}"
    return [
        (f"{endpoint}/stack.mrcs", {}),
        ("s3://bucket/stack.mrcs", {"anon": True, "endpoint_url": endpoint}),
    ]


QUICK = configuration().replace(remote_connect_timeout=0.5, remote_timeout=60.0, remote_attempts=2)
"""Quick to give up connecting; a read's limit far past the time any test here allows."""


def _within_limits(limits) -> float:
    """Far more seconds than an open that cannot connect may take under `limits`: each attempt (a
    request for the size, and one for the bytes, each connecting) and the pauses between them, ten times."""
    attempt = 2 * limits.remote_connect_timeout
    pauses = sum(limits.remote_backoff * 2**n for n in range(limits.remote_attempts))
    return 10 * (limits.remote_attempts * attempt + pauses) + 10


def _unreachable(key: str, options: dict) -> OSError:
    started = time.monotonic()
    with pytest.raises(OSError) as raised:
        vio.formats.open_reader(key, Storage(options, QUICK))
    assert time.monotonic() - started < _within_limits(QUICK) < QUICK.remote_timeout
    return raised.value


@pytest.mark.parametrize("which", [0, 1], ids=["https", "s3"])
def test_nothing_listening_at_a_url_is_one_short_error_naming_it_and_the_cause(which):
    key, options = _keys(_closed_port())[which]
    error = _unreachable(key, options)
    assert str(error).startswith(f"[Errno 5] cannot connect to {key}: ")
    assert "Error" in str(error)  # the cause's class names it
    assert error.__cause__ is None and error.__suppress_context__
    assert len(traceback.format_exception(error)) < 12


@pytest.mark.parametrize("which", [0, 1], ids=["https", "s3"])
def test_a_server_that_never_lets_a_connection_be_made_fails_within_the_connect_limit(which, unanswered_port):
    key, options = _keys(unanswered_port)[which]
    error = _unreachable(key, options)
    assert str(error).startswith(f"[Errno 5] cannot connect to {key}: ")
    assert str(error).endswith(f"after {QUICK.remote_attempts} attempts")
    assert error.__cause__ is None and error.__suppress_context__


@pytest.mark.parametrize(
    ("module", "key", "install"),
    [
        ("s3fs", "s3://bucket/stack.mrcs", "pip install 'vitrio[remote]')"),
        ("fsspec", "https://example.org/stack.mrcs", "pip install 'vitrio[remote]')"),
        ("gcsfs", "gs://bucket/stack.mrcs", "pip install 'vitrio[remote]' gcsfs)"),
    ],
)
def test_a_url_whose_backend_is_not_installed_names_the_extra_to_install(monkeypatch, module, key, install):
    monkeypatch.setitem(sys.modules, module, None)  # importing it fails
    imported = sys.modules["fsspec.registry"]._registry  # the filesystems fsspec imported, imported again
    monkeypatch.delitem(imported, key.partition(":")[0], raising=False)
    with pytest.raises(ImportError) as raised:
        vio.formats.open_reader(key, {"anon": True})
    message = str(raised.value)
    assert message.startswith(f"{key}: install vitrio[remote] to read {key.partition(':')[0]}:// keys")
    assert message.endswith(install)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


@pytest.mark.parametrize(
    "entry",
    [
        lambda options: vio.read("s3://bucket/stack.mrcs", storage_options=options),
        lambda options: vio.loader(storage_options=options),
        lambda options: read_particles("s3://bucket/particles.star", storage_options=options),
        lambda options: vio.formats.open_reader("s3://bucket/stack.mrcs", storage_options=options),
    ],
    ids=["read", "loader", "read_particles", "open_reader"],
)
def test_storage_options_written_as_text_is_one_type_error_at_the_public_entry(entry):
    with pytest.raises(
        TypeError, match=r'^storage_options is a mapping such as \{"anon": True\}, not a str$'
    ):
        entry("{anon: true}")
