"""Hostile HTTP servers (Python's own, on 127.0.0.1): a chunk's body is bounded and checked, never inflated.

The servers answer the store's metadata from disk and its chunks as an
attacker would: ignoring `Range` with a gzip body that inflates a
thousandfold, with an endless body, or with bodies shorter than they say.
A read in a child process whose memory is limited is refused within seconds.
"""

from __future__ import annotations

import functools
import http.server
import os
import struct
import sys
import threading
import time
import zlib

import numpy as np
import pytest

import vitrio as vio
from vitrio.formats.zarr._keys import METADATA_FILES

from ..formats.test_bombs import run_limited

MIB = 1 << 20


def gzip_of_zeros(mebibytes: int) -> bytes:
    """A gzip body that inflates to `mebibytes` MiB of zeros, about a thousand times smaller."""
    block = bytes(MIB)
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    segment = squeeze.compress(block) + squeeze.flush(zlib.Z_FULL_FLUSH)  # the same for every block
    crc = 0
    for _ in range(mebibytes):
        crc = zlib.crc32(block, crc)
    trailer = struct.pack("<II", crc, (mebibytes * MIB) & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + segment * mebibytes + squeeze.flush() + trailer


class Hostile(http.server.SimpleHTTPRequestHandler):
    """The store's metadata as on disk; its chunks answered as `self.server.mode` says, Range ignored."""

    def log_message(self, *arguments) -> None:
        """Nothing: the tests' output stays clean."""

    def do_GET(self) -> None:
        chunk = self.translate_path(self.path)
        if self.server.mode == "gzip metadata" and os.path.basename(chunk) == ".zattrs":
            return self.answer(200, self.server.bomb, {"Content-Encoding": "gzip"})
        if os.path.basename(chunk) in METADATA_FILES or not os.path.isfile(chunk):
            return super().do_GET()
        with open(chunk, "rb") as file:
            stored = file.read()
        mode = self.server.mode
        try:
            if mode == "gzip":  # 1 MiB sent, 1 GiB once inflated
                self.answer(200, self.server.bomb, {"Content-Encoding": "gzip"})
            elif mode == "endless":  # no length said, and more bytes than any chunk
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                for _ in range(1024):
                    self.wfile.write(bytes(MIB))
            elif mode == "cut":  # the length of the chunk said, half of it sent
                self.answer(200, stored[: len(stored) // 2], {"Content-Length": str(len(stored))})
            elif mode == "piece":  # a range of the whole said, a piece of it sent
                piece = {"Content-Range": f"bytes 0-9/{len(stored)}"}
                self.answer(206, stored[:10], piece)
        except OSError:  # the client hung up, as it should
            pass

    def answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def hostile(tomogram):
    """A hostile server of the tomogram's folder: the URL of its store, and the server to set the mode of."""
    path, _ = tomogram
    handler = functools.partial(Hostile, directory=str(path.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.mode, server.bomb = "gzip", gzip_of_zeros(1024)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{path.name}", server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("mode", ["gzip", "endless", "gzip metadata"])
def test_a_body_that_ignores_range_is_refused_unread_under_a_memory_limit(hostile, mode, monkeypatch):
    url, server = hostile
    server.mode = mode
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))  # the child imports these sources
    body = f"""
        import numpy as np
        import vitrio as vio
        out = np.zeros((1, 1, 4, 4), np.float32)
        try:
            vio.read_patches_async(vio.loader(workers=1), out, {url!r}, [[2, 2, 2]]).get()
        except Exception as error:
            print(type(error).__name__, error)
        """
    printed, seconds = run_limited(body, 512 * MIB)  # the bomb inflates to 1 GiB
    assert seconds < 30, (seconds, printed)
    if mode == "gzip metadata":  # fetched as chunks are: refused unread
        assert printed.startswith(f"OSError {url}: .zattrs: "), printed
        assert f"{url}/.zattrs (bytes 0-" in printed and "sent as 'gzip' where identity was asked" in printed
        return
    assert f"{url}: chunk 0/0/0/0: " in printed, printed
    if mode == "gzip":
        assert printed.startswith("OSError") and "sent as 'gzip' where identity was asked" in printed
        assert f"{url}/0/0/0/0 (bytes 0-" in printed
    else:
        assert printed.startswith("FormatError")
        assert f"bytes a chunk may take (sent by {url}/0/0/0/0)" in printed


@pytest.mark.parametrize(("mode", "said"), [("cut", "ClientPayloadError"), ("piece", "bytes 0-9 of")])
def test_a_body_shorter_than_it_says_is_an_error_naming_the_url_and_the_range(hostile, mode, said):
    url, server = hostile
    server.mode = mode
    start = time.monotonic()
    with pytest.raises(OSError, match=f"{url}/0/0/0/0 \\(bytes 0-\\d+\\): .*{said}"):
        out = np.zeros((1, 1, 4, 4), np.float32)
        vio.read_patches_async(vio.loader(workers=1), out, url, [[2, 2, 2]]).get()
    assert time.monotonic() - start < 10
