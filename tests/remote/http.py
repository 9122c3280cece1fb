"""A threaded HTTP(S) server on 127.0.0.1 serving files by ranges, told to fail the requests it answers next.

Faults, applied one per GET in the order queued: "drop" closes the connection
unanswered, "503" answers Service Unavailable, "short" announces the range
asked and sends half of it, "half" says it sends the range asked but announces
and sends half of it, "long" sends more than asked, "whole" ignores `Range`
and sends the whole file, "stall" answers nothing until `release` is set.
"""

from __future__ import annotations

import http.server
import re
import ssl
import threading
from collections import deque
from typing import Any

__all__ = ["RangeServer"]


class RangeServer:
    """Serves `files` ({name: bytes}, or anything whose `get(name)` answers) at `url/<name>`; counts GETs
    (`gets`), keeps the name and `Range` header of each (`asked`) and the headers of every request
    (`headers`), and fails as `fail` queues. With `redirect` (a URL), every request but those of the
    names in `kept` is answered 302 to the same path and query under it. With `heads` "503", every HEAD
    is answered Service Unavailable.

    With `tls` (a server's `ssl.SSLContext`), each connection is TLS and `url` is https://; setting `tls`
    later changes the certificate new connections are shown (each request makes one: HTTP/1.0). With
    `meet` (a `threading.Barrier`), each GET waits there until as many are in flight; a broken barrier
    drops the connection.
    """

    def __init__(self, files: Any, tls: ssl.SSLContext | None = None):
        self.files = files
        self.tls = tls
        self.gets = 0
        self.asked: list[tuple[str, str | None]] = []
        self.headers: list[dict[str, str]] = []
        self.redirect: str | None = None
        self.kept: set[str] = set()
        self.heads: str | None = None
        self.release = threading.Event()
        self.faults: deque[str] = deque()
        self.always: str | None = None
        self.meet: threading.Barrier | None = None
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def redirected(self) -> bool:
                with server._lock:
                    server.headers.append(dict(self.headers))
                if server.redirect is None or self.path.lstrip("/") in server.kept:
                    return False
                self.send_response(302)
                self.send_header("Location", server.redirect + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True

            def do_HEAD(self):
                if self.redirected():
                    return
                body = server.files.get(self.path.lstrip("/"))
                if body is None or server.heads == "503":
                    self.send_error(404 if body is None else 503)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", f'"{hash(body) & 0xFFFFFFFF:x}"')
                self.end_headers()

            def do_GET(self):
                if self.redirected():
                    return
                with server._lock:
                    server.gets += 1
                    server.asked.append((self.path.lstrip("/"), self.headers.get("Range")))
                    fault = server.faults.popleft() if server.faults else server.always
                if server.meet is not None:
                    try:
                        server.meet.wait()
                    except threading.BrokenBarrierError:
                        fault = "drop"
                body = server.files.get(self.path.lstrip("/"))
                if body is None:
                    self.send_error(404)
                    return
                if fault == "stall":
                    server.release.wait()
                    self.close_connection = True
                    return
                if fault == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault == "503":
                    self.send_error(503)
                    return
                match = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                if match is None or fault == "whole":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                first, last = int(match.group(1)), min(int(match.group(2)), len(body) - 1)
                part = body[first : last + 1]
                sent = (
                    part[: len(part) // 2]
                    if fault == "short"
                    else part + b"x" * 64
                    if fault == "long"
                    else part
                )
                if fault == "half":
                    sent = part[: len(part) // 2]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(body)}")
                self.send_header("Content-Length", str(len(sent) if fault in ("long", "half") else len(part)))
                self.end_headers()
                self.wfile.write(sent)
                if fault == "short":
                    self.close_connection = True

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128  # a read fetches many ranges at once, a connection each

            def get_request(self):
                connection, address = super().get_request()
                if server.tls is not None:  # a failed handshake is an OSError: the connection is dropped
                    connection = server.tls.wrap_socket(connection, server_side=True)
                return connection, address

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self._server.server_address[1]}"

    def fail(self, *faults: str) -> None:
        """Fail the next GETs, one fault each, in this order."""
        with self._lock:
            self.faults.extend(faults)

    def stop(self) -> None:
        """Stop serving (a stalled request let go)."""
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
