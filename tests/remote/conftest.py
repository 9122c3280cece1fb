"""Fixtures of the tests of files at URLs: the S3 server on 127.0.0.1, counting the ranges it serves,
and files of every raw format put there beside their local copies (`write_files` writes them)."""

from __future__ import annotations

import contextlib
import socket
import threading

import mrcfile
import numpy as np
import pytest
import tifffile

import vitrio as vio
from vitrio._config import configuration, configure
from vitrio._remote import merge_ranges
from vitrio.testing.dm import write_dm

from ..zarr.s3 import LocalS3

BUCKET = "remote-files"


class RangedS3(LocalS3):
    """`LocalS3` also keeping the `Range` header of each request: `(method, path, range)` in `ranged`.
    With `meet` (a `threading.Barrier`), each GET waits there until as many are in flight; a broken
    barrier answers 500. With `failing` "503", every request is answered Service Unavailable; with
    "drop", its connection is closed unanswered."""

    def __init__(self) -> None:
        self.ranged: list[tuple[str, str, str | None]] = []
        self.meet: threading.Barrier | None = None
        self.failing: str | None = None
        super().__init__()

    def _answer(self, inner, environ, start_response):
        with self._lock:
            self.ranged.append(
                (environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("HTTP_RANGE"))
            )
        if self.meet is not None and environ["REQUEST_METHOD"] == "GET":
            try:
                self.meet.wait()
            except threading.BrokenBarrierError:
                start_response("500 Not Met", [])
                return [b""]
        if self.failing == "503":
            start_response("503 Service Unavailable", [("Content-Type", "application/xml")])
            unavailable = b"<Error><Code>ServiceUnavailable</Code><Message>Unavailable</Message></Error>"
            return [b"" if environ["REQUEST_METHOD"] == "HEAD" else unavailable]
        if self.failing == "drop":
            environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
            start_response("500 Dropped", [])
            return [b""]
        return super()._answer(inner, environ, start_response)

    def mark(self) -> int:
        """The number of requests so far, to count those after it with `since`."""
        with self._lock:
            return len(self.ranged)

    def since(self, mark: int) -> list[tuple[str, str, str | None]]:
        """The requests made after `mark`."""
        with self._lock:
            return self.ranged[mark:]

    def put(self, local, name: str) -> str:
        """Copy the local file into the bucket as `name`; its `s3://` URL."""
        if not self.fs.exists(BUCKET):
            self.fs.call_s3("create_bucket", Bucket=BUCKET)
        self.fs.put(str(local), f"{BUCKET}/{name}")
        self.fs.invalidate_cache()
        return f"s3://{BUCKET}/{name}"


@pytest.fixture(scope="module")
def s3():
    """The S3 server on 127.0.0.1, stopped when the module's tests are done."""
    server = RangedS3()
    yield server
    server.stop()


def write_files(folder) -> dict:
    """{name: (path, values)} of a stack, a volume (a particle stack whose header says volume), a DM image
    and an uncompressed TIFF stack written in `folder`."""
    rng = np.random.default_rng(28)
    made = {
        "stack.mrcs": rng.normal(size=(12, 40, 56)).astype(np.float32),
        "volume.mrc": rng.integers(-900, 900, size=(9, 24, 32)).astype(np.int16),
        "image.dm4": rng.integers(0, 60000, size=(36, 44)).astype(np.uint16),
        "stack.tif": rng.integers(0, 250, size=(5, 30, 20)).astype(np.uint8),
    }
    out = {}
    for name, values in made.items():
        path = folder / name
        if name.endswith(".dm4"):
            write_dm(path, values)
        elif name.endswith(".tif"):
            tifffile.imwrite(path, values)
        elif name == "stack.mrcs":
            vio.write_stack(values, path)
        else:
            vio.write_single(values, path)
        out[name] = (path, values)
    return out


@pytest.fixture(scope="module")
def files(s3, tmp_path_factory):
    """{name: (local path, URL, values)} of the files of `write_files`, put in the bucket."""
    made = write_files(tmp_path_factory.mktemp("files"))
    return {name: (path, s3.put(path, name), values) for name, (path, values) in made.items()}


def read_merged_batch(loader, stack, mark):
    """Read 8 images of `stack` (the path, URL and values of `stack.mrcs`) in three runs of touching images,
    after its header, and check them; `mark()`, called after the header, and the sorted `Range` headers of
    the runs, merged as `remote_gap` 1 merges them."""
    path, url, values = stack
    indices = [7, 0, 1, 2, 9, 3, 11, 10]
    out = np.empty((len(indices), *values.shape[1:]), np.float32)
    vio.read_batch_async(loader, out[:1], [vio.ImageLocation(url, 5)]).get()  # the header, once
    marked = mark()
    vio.read_batch_async(loader, out, [vio.ImageLocation(url, i) for i in indices]).get()
    np.testing.assert_array_equal(out, values[indices])
    with mrcfile.mmap(path, permissive=True) as file:
        offset = file.header.nbytes + file.extended_header.nbytes
    size = values[0].nbytes
    spans = merge_ranges(
        [(offset + i * size, offset + (i + 1) * size) for i in indices], 1, configuration().remote_part
    )
    assert len(spans) == 3
    return marked, sorted(f"bytes={a}-{b - 1}" for a, b in spans)


@pytest.fixture
def limits():
    """Sets fields of vitrio's configuration for the test (`limits(remote_gap=1)`), restored after it."""
    with contextlib.ExitStack() as stack:
        yield lambda **changes: stack.enter_context(configure(**changes))
