"""Hostile OME-Zarr stores: links to the user's private files, bombs through every codec chain, chunks
far larger than their array or far too small for a read, special files, and malformed metadata.

The stores are planted by another user (their files owned by uid 12345);
the secrets are this user's private files. Bombs are read in a subprocess
under a limit of its address space (256 MiB past its size after start) and
must be refused with a `FormatError` naming the store and the chunk within
seconds.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from pathlib import Path

import google_crc32c
import numcodecs
import numpy as np
import pytest
import zarr

import vitrio as vio
from vitrio.cli import main
from vitrio.formats.zarr import ChunkCache, OmeZarrFormat
from vitrio.formats.zarr._metadata import METADATA_LIMIT

from ..formats.test_bombs import run_limited

pytestmark = pytest.mark.timeout(120)

OTHER_UID = 12345
SECRET = b"[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY!!\n"
GIB = 1 << 30


def fresh_format() -> type[OmeZarrFormat]:
    """A format with a cache of its own, so that no test sees another's chunks."""
    return OmeZarrFormat.configured(cache_bytes=1 << 20)


def read(key, **options):
    return vio.read(key, readers=vio.reader_provider(formats=[fresh_format()]), **options)


def image_store(path: Path, values: np.ndarray, zarr_format: int = 2, **array) -> Path:
    """A one-level OME-Zarr image of `values` at `path`, its array made by zarr with `array`'s options."""
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    group.create_array("0", data=values, **array)
    axes = [{"name": n, "type": "space"} for n in "zyx"[3 - values.ndim :]]
    multiscales = [{"version": "0.4", "axes": axes, "datasets": [{"path": "0"}]}]
    if zarr_format == 2:
        group.attrs["multiscales"] = multiscales
    else:
        group.attrs["ome"] = {"version": "0.5", "multiscales": multiscales}
    return path


def planted(store: Path) -> Path:
    """`store` given to another user, as a store planted in a shared folder is."""
    for folder, names, files in os.walk(store):
        for name in [*names, *files]:
            os.chown(os.path.join(folder, name), OTHER_UID, OTHER_UID, follow_symlinks=False)
    os.chown(store, OTHER_UID, OTHER_UID)
    return store


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """This user's private file, 64 bytes of credentials padded, in a private folder."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    path = home / "credentials"
    path.write_bytes(SECRET.ljust(64 * 4, b"\0"))
    path.chmod(0o600)
    return path


# ---------------------------------------------------------------- links (item 2)


def test_a_chunk_linked_to_a_private_file_is_not_read(tmp_path: Path, secret: Path, capsys):
    """The chunk is uncompressed and declared at the secret's size: read through the link, the
    conversion would copy the credentials into the output."""
    store = image_store(tmp_path / "shared.zarr", np.ones((8, 8), np.float32), chunks=(8, 8), compressor=None)
    chunk = store / "0" / "0.0"
    assert chunk.stat().st_size == secret.stat().st_size
    chunk.unlink()
    chunk.symlink_to(secret)
    planted(store)
    with pytest.raises(vio.FormatError, match=r"shared.zarr: chunk 0/0\.0: 0/0\.0 is a link"):
        read(store)
    out = tmp_path / "out.mrc"
    assert main(["convert", str(store), str(out)]) == 1
    assert "shared.zarr" in capsys.readouterr().err
    assert not out.exists()
    files = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != secret]
    assert files and not any(SECRET[:20] in p.read_bytes() for p in files)


def test_a_level_folder_linked_to_a_private_store_is_not_read(tmp_path: Path):
    private = tmp_path / "home" / "tomogram.zarr"
    private.parent.mkdir(mode=0o700)
    vio.write_single(np.full((8, 8), 1234.0, np.float32), private)
    store = image_store(tmp_path / "shared.zarr", np.ones((8, 8), np.float32))
    os.rename(store / "0", tmp_path / "moved")
    (store / "0").symlink_to(private / "0", target_is_directory=True)
    planted(store)
    with pytest.raises(vio.FormatError, match=r"shared.zarr: .*0 is a link; nothing is read through it"):
        read(store)


def test_metadata_linked_elsewhere_is_not_read(tmp_path: Path):
    store = image_store(tmp_path / "shared.zarr", np.ones((8, 8), np.float32))
    other = image_store(tmp_path / "other.zarr", np.zeros((4, 4), np.float32))
    (store / "0" / ".zarray").unlink()
    (store / "0" / ".zarray").symlink_to(other / "0" / ".zarray")
    with pytest.raises(vio.FormatError, match=r"shared.zarr: level 0: 0/\.zarray: 0/\.zarray is a link"):
        read(store)


def test_a_store_named_through_a_link_is_read(tmp_path: Path):
    """The store's own path is the user's to name, links and all: only what lies under it is checked."""
    values = np.arange(64, dtype=np.float32).reshape(8, 8)
    vio.write_single(values, tmp_path / "real.zarr")
    (tmp_path / "named.zarr").symlink_to(tmp_path / "real.zarr", target_is_directory=True)
    np.testing.assert_array_equal(read(tmp_path / "named.zarr"), values)


# ---------------------------------------------------------------- bombs (item 4)


def zstd_zeros(nbytes: int) -> bytes:
    """A zstd frame that declares no size and decodes to `nbytes` zeros: 4 bytes a 128 KiB block."""
    block = 1 << 17
    count = nbytes // block
    blocks = (((block << 3) | 2 | (n == count - 1)).to_bytes(3, "little") + b"\0" for n in range(count))
    return struct.pack("<IBB", 0xFD2FB528, 0, 0x38) + b"".join(blocks)


def gzip_zeros(nbytes: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    return b"".join(compressor.compress(zeros) for _ in range(nbytes >> 20)) + compressor.flush()


def shard_of(inner: bytes, count: int) -> bytes:
    """A shard whose first inner chunk is `inner` and whose `count - 1` others are missing."""
    index = struct.pack("<2Q", 0, len(inner)) + struct.pack("<2Q", (1 << 64) - 1, (1 << 64) - 1) * (count - 1)
    return inner + index + struct.pack("<I", google_crc32c.value(index))


BOMBS = {
    # a filter: zarr's pipeline decoded the frame unbounded
    "filters": (
        {"zarr_format": 2, "filters": [numcodecs.Shuffle(4)], "compressor": numcodecs.Zstd()},
        "0/0.0",
        lambda: zstd_zeros(GIB),
    ),
    "transpose": (
        {
            "zarr_format": 3,
            "filters": [zarr.codecs.TransposeCodec(order=(1, 0))],
            "compressors": [zarr.codecs.ZstdCodec()],
        },
        "0/c/0/0",
        lambda: zstd_zeros(GIB),
    ),
    "three codecs": (
        {"zarr_format": 3, "compressors": [zarr.codecs.Crc32cCodec(), zarr.codecs.GzipCodec()]},
        "0/c/0/0",
        lambda: gzip_zeros(64 << 20),
    ),
    "shards": (
        {"zarr_format": 3, "shards": (64, 64), "chunks": (32, 32), "compressors": [zarr.codecs.ZstdCodec()]},
        "0/c/0/0",
        lambda: shard_of(zstd_zeros(GIB), 4),
    ),
}


@pytest.mark.parametrize("kind", BOMBS)
def test_a_bomb_through_any_codec_chain_is_refused_under_a_memory_limit(tmp_path: Path, kind: str):
    """A 64 x 64 float32 image (16 KiB) whose one chunk decodes to 1 GiB (64 MiB for gzip)."""
    options, chunk, bomb = BOMBS[kind]
    store = image_store(tmp_path / "bomb.zarr", np.ones((64, 64), np.float32), **options)
    (store / chunk).write_bytes(bomb())
    assert sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) < 100_000
    body = f"""
        import vitrio as vio
        try:
            vio.read({str(store)!r})
        except vio.FormatError as error:
            print("FormatError", error)
        except MemoryError as error:
            print("MemoryError", error)
        else:
            print("read")
        """
    outcome, seconds = run_limited(body, 256 << 20)
    assert outcome.startswith(f"FormatError {store}: chunk {chunk}: cannot be decoded"), outcome
    assert seconds < 30


def test_chunks_far_larger_than_their_array_are_refused(tmp_path: Path):
    """40 images of 8 x 8 declared in chunks of (1, 4096, 4096): 82 KB on disk, 2.6 GB decoded."""
    store = tmp_path / "overhang.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    array = group.create_array("0", shape=(40, 8, 8), chunks=(1, 4096, 4096), dtype=np.float32)
    axes = [{"name": "t", "type": "time"}, {"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    group.attrs["multiscales"] = [{"version": "0.4", "axes": axes, "datasets": [{"path": "0"}]}]
    for n in range(40):
        (store / "0" / f"{n}.0.0").write_bytes(numcodecs.Zstd().encode(bytes(4096 * 4096 * 4)))
    assert array.shape == (40, 8, 8)
    started = time.monotonic()
    with pytest.raises(
        vio.FormatError, match=r"overhang.zarr: array '0': chunks of \(1, 4096, 4096\).*far larger"
    ):
        read(store)
    assert time.monotonic() - started < 5


def test_the_cache_counts_what_it_keeps_alive(tmp_path: Path):
    """A view of a decoded chunk keeps the whole chunk: the cache counts it so, and the reader keeps
    the part of an overhanging chunk inside its array as a copy of its own."""
    cache = ChunkCache(1 << 20)
    decoded = np.zeros((256, 256), np.float32)
    cache.get_many(["view"], lambda keys: ((key, decoded[:8, :8]) for key in keys))
    assert cache.nbytes == decoded.nbytes
    store = image_store(tmp_path / "s.zarr", np.ones((4, 8, 8), np.float32), chunks=(1, 32, 32))
    configured = fresh_format()
    values = vio.read(store, readers=vio.reader_provider(formats=[configured]))
    assert values.shape == (4, 8, 8) and (values == 1).all()
    assert configured.chunk_cache.nbytes == 4 * 8 * 8 * 4  # not the 4 chunks of 32 x 32 decoded


# ---------------------------------------------------------------- too many chunks (item 5)


def test_a_read_of_far_too_many_chunks_is_refused_saying_why(tmp_path: Path):
    """An 8192 x 8192 image in chunks of 1 x 1: about an hour to read whole, at 50 us a chunk."""
    store = tmp_path / "dust.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    group.create_array("0", shape=(8192, 8192), chunks=(1, 1), dtype=np.uint8, fill_value=7)
    axes = [{"name": n, "type": "space"} for n in "yx"]
    group.attrs["multiscales"] = [{"version": "0.4", "axes": axes, "datasets": [{"path": "0"}]}]
    started = time.monotonic()
    with pytest.raises(
        vio.FormatError, match=r"dust.zarr: a read of 67108864 values would decode 67108864 chunks"
    ):
        read(store)
    assert time.monotonic() - started < 5
    out = np.zeros((1, 64, 64), np.uint8)  # a small patch touches few chunks: read
    vio.read_patches_async(vio.loader(workers=1, formats=[fresh_format()]), out, store, [[100, 100]]).get()
    assert (out == 7).all()


# ---------------------------------------------------------------- special files (item 7)


def test_a_fifo_as_a_chunk_is_refused_without_blocking(tmp_path: Path):
    store = image_store(tmp_path / "fifo.zarr", np.ones((8, 8), np.float32))
    (store / "0" / "0.0").unlink()
    os.mkfifo(store / "0" / "0.0")
    with pytest.raises(vio.FormatError, match=r"fifo.zarr: chunk 0/0\.0: 0/0\.0 is not a regular file"):
        read(store)


@pytest.mark.parametrize("name", [".zattrs", ".zgroup", "0/.zarray"])
def test_metadata_that_is_a_fifo_or_dev_zero_is_refused_without_blocking(tmp_path: Path, name: str):
    store = image_store(tmp_path / "special.zarr", np.ones((8, 8), np.float32))
    (store / name).unlink()
    os.mkfifo(store / name)
    with pytest.raises(vio.FormatError, match=rf"special.zarr: .*{name}.* not a regular file"):
        read(store)
    (store / name).unlink()
    (store / name).symlink_to("/dev/zero")
    with pytest.raises(vio.FormatError, match=rf"special.zarr: .*{name}.* is a link"):
        read(store)


def test_metadata_past_its_limit_is_refused(tmp_path: Path):
    store = image_store(tmp_path / "huge.zarr", np.ones((8, 8), np.float32))
    with open(store / ".zattrs", "r+b") as file:
        file.truncate(METADATA_LIMIT + 1)  # sparse: no disk used
    with pytest.raises(vio.FormatError, match=rf"huge.zarr: \.zattrs: {METADATA_LIMIT + 1} bytes stored"):
        read(store)


# ---------------------------------------------------------------- errors that name the store (item 9)


def test_a_corrupt_gzip_chunk_is_a_format_error_naming_the_chunk(tmp_path: Path):
    store = tmp_path / "g.zarr"
    vio.write_single(
        np.ones((8, 8), np.float32), store, formats=[OmeZarrFormat.configured(codec="gzip", levels=1)]
    )
    chunk = next(p for p in (store / "0").rglob("*") if p.is_file() and not p.name.startswith("."))
    content = bytearray(chunk.read_bytes())
    content[12:20] = b"\xff" * 8
    chunk.write_bytes(bytes(content))
    with pytest.raises(vio.FormatError, match=r"g.zarr: chunk 0/.*corrupt gzip data"):
        read(store)


@pytest.mark.parametrize(
    "transformations",
    [
        [{"type": "scale", "scale": ["a", "b"]}],
        [{"type": "scale", "scale": [None, 1]}],
        [{"type": "scale", "scale": "ab"}],
        [{"type": "scale", "scale": [10**400, 1]}],
        5,
        "scale",
    ],
)
def test_malformed_ngff_scales_are_format_errors_naming_the_store(tmp_path: Path, transformations):
    store = image_store(tmp_path / "n.zarr", np.ones((8, 8), np.float32))
    attributes = json.loads((store / ".zattrs").read_text())
    attributes["multiscales"][0]["datasets"][0]["coordinateTransformations"] = transformations
    (store / ".zattrs").write_text(json.dumps(attributes))
    with pytest.raises(vio.FormatError, match=r"n.zarr: .*(scale|coordinateTransformations)"):
        read(store)
