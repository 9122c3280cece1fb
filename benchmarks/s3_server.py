"""Moto's S3 server for the benchmarks, in a process of its own on 127.0.0.1: requests counted and
held a set delay at the server, none logged.

The delay stands in for a network's latency: each request waits `delay`
seconds in the server's thread before it is answered, as a request to a
distant S3 waits, at no cost to the client's cores (a proxy in the client's
process took a third of its CPU). The server logs no request: a log line a
request took a fifth of the server's time, on the cores the client reads with.

`start_s3()` starts it; `set_delay(options, seconds)` and `requests(options)`
set its delay and read its count through the paths under `/_bench/`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request

CONTROL = "/_bench/"


def start_s3():
    """The server, started, and the storage options that reach it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, __file__, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("moto's S3 server did not start") from None
            time.sleep(0.2)
    options = {
        "key": "bench",
        "secret": "bench",
        "endpoint_url": f"http://127.0.0.1:{port}",
        "client_kwargs": {"region_name": "us-east-1"},
    }
    return server, options


def _control(options: dict, path: str, method: str = "GET") -> dict:
    request = urllib.request.Request(options["endpoint_url"] + CONTROL + path, method=method)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def set_delay(options: dict, seconds: float) -> None:
    """Hold each request `seconds` at the server from now on."""
    _control(options, f"delay/{seconds}", "PUT")


def requests(options: dict) -> int:
    """The requests the server has answered (its own control paths aside)."""
    return _control(options, "requests")["requests"]


class _Held:
    """Moto's application behind a count and a delay of each request."""

    def __init__(self, app):
        self.app, self.delay, self.count = app, 0.0, 0
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith(CONTROL):
            asked = path[len(CONTROL) :]
            if asked.startswith("delay/"):
                self.delay = float(asked.removeprefix("delay/"))
            body = json.dumps({"requests": self.count, "delay": self.delay}).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        with self._lock:
            self.count += 1
        if self.delay:
            time.sleep(self.delay)
        return self.app(environ, start_response)


def _serve(port: int) -> None:
    import logging

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    logging.disable(logging.INFO)
    app = _Held(DomainDispatcherApplication(create_backend_app))
    run_simple("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
