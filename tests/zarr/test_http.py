"""OME-Zarr stores served over HTTP (Python's own server on 127.0.0.1), read through fsspec."""

from __future__ import annotations

import functools
import http.server
import threading

import numpy as np
import pytest

import vitrio as vio


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *arguments) -> None:
        """Nothing: the tests' output stays clean."""


@pytest.fixture
def served(tomogram):
    """The tomogram's folder served over HTTP: the URL of its store."""
    path, _ = tomogram
    handler = functools.partial(_Quiet, directory=str(path.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{path.name}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_store_over_http_reads_as_on_disk(tomogram, served):
    _, values = tomogram
    assert vio.query_descriptor(f"{served}#1").extents == (20, 48, 40)
    out = np.zeros((2, 6, 10, 10), np.float32)
    vio.read_patches_async(vio.loader(workers=2), out, served, [[10, 10, 10], [30, 90, 70]]).get()
    np.testing.assert_array_equal(out[0], values[7:13, 5:15, 5:15])
    np.testing.assert_array_equal(out[1], values[27:33, 85:95, 65:75])
    with pytest.raises(FileNotFoundError, match="missing.zarr"):
        vio.read(served.replace("tomo.zarr", "missing.zarr"))


class _DropsFirst(_Quiet):
    """Answers 503 to the first request of each chunk, then serves it."""

    dropped: set[str] = set()

    def do_GET(self) -> None:
        chunk = "/0/" in self.path and not self.path.endswith((".zarray", ".zattrs", ".zgroup", "zarr.json"))
        if chunk and self.path not in self.dropped:
            self.dropped.add(self.path)
            self.send_error(503, "busy")
            return
        super().do_GET()


def test_a_chunk_the_server_is_too_busy_for_is_asked_again(tomogram):
    path, values = tomogram
    _DropsFirst.dropped = set()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_DropsFirst, directory=str(path.parent))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{path.name}"
        read = vio.read(url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    np.testing.assert_array_equal(read, values)
    assert _DropsFirst.dropped  # chunks were refused once, and read on the next try
