"""An S3 server on 127.0.0.1 for the tests: moto's, in a thread, counting the requests it answers.

`LocalS3` starts moto's server on a free port, wraps its WSGI application
to record each request (method and path), and can be made to drop every
request from some point on, closing the connection without an answer, as
a server that dies mid-read does.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

import fsspec
from moto.server import ThreadedMotoServer

__all__ = ["LocalS3"]


class LocalS3:
    """A moto S3 server on 127.0.0.1 and an s3fs filesystem reaching it.

    Attributes:
        url: The endpoint, `http://127.0.0.1:<port>`.
        options: The `storage_options` that reach it (fake credentials, no retries, short timeouts).
        fs: An s3fs filesystem over it, to make buckets and put stores.
        requests: The `(method, path)` of every request answered so far.
    """

    def __init__(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        self.requests: list[tuple[str, str]] = []
        self._drop_after: int | None = None
        self._lock = threading.Lock()
        wsgi = self._server._server
        inner = wsgi.app
        wsgi.app = lambda environ, start_response: self._answer(inner, environ, start_response)
        self.options: dict[str, Any] = {
            "key": "testing",
            "secret": "testing",
            "endpoint_url": self.url,
            "client_kwargs": {"region_name": "us-east-1"},
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2, "read_timeout": 5},
        }
        self.fs = fsspec.filesystem("s3", **self.options)
        self._stopped = False

    def _answer(self, inner, environ, start_response):
        with self._lock:
            dropping = self._drop_after is not None and len(self.requests) >= self._drop_after
            if not dropping:
                self.requests.append((environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")))
        if dropping:
            environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
            start_response("500 Dropped", [])
            return [b""]
        return inner(environ, start_response)

    def gets(self, prefix: str = "") -> list[str]:
        """The paths of the GET requests answered so far that start with `/<prefix>`."""
        with self._lock:
            return [p for method, p in self.requests if method == "GET" and p.startswith("/" + prefix)]

    def drop_after(self, count: int) -> None:
        """Answer `count` more requests, then drop every one (closing its connection unanswered)."""
        with self._lock:
            self._drop_after = len(self.requests) + count

    def put_store(self, local: str, bucket: str, name: str) -> str:
        """Copy the local store `local` into `bucket` (made if missing) as `name`; its `s3://` URL."""
        if not self.fs.exists(bucket):
            self.fs.call_s3("create_bucket", Bucket=bucket)
        self.fs.put(local, f"{bucket}/{name}", recursive=True)
        self.fs.invalidate_cache()
        return f"s3://{bucket}/{name}"

    def stop(self) -> None:
        """Stop the server."""
        if not self._stopped:
            self._stopped = True
            self._server.stop()
            self._server._server.server_close()
