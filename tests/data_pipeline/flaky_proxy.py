"""An HTTP proxy on loopback that fails requests on purpose: the flaky storage of the retry tests.

    python flaky_proxy.py UPSTREAM LOGFILE FAILURES HOW [PORT]

Forwards every request to UPSTREAM (the range server or the moto S3 server), except that each
distinct request (method, path, Range) fails its first FAILURES times, in the way HOW says:

- ``503``: answers 503 Service Unavailable;
- ``reset``: resets the connection before answering;
- ``cut``: sends the headers and half the body, then resets the connection;
- ``stall``: answers nothing for STALL_S seconds, then closes (the client's read times out).

Binds PORT (0: a free one), prints it on the first line of stdout once it listens; a test can
kill it and start it again on the same port: a server that dies and comes back. Started by the
``flaky_proxy`` fixture (conftest.py).
Appends ``METHOD PATH RANGE OUTCOME`` per request to LOGFILE.
"""

from __future__ import annotations

import http.client
import socket
import struct
import sys
import threading
import time
from collections import Counter
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOWS = ("503", "reset", "cut", "stall")
STALL_S = 5.0
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class FlakyProxy(BaseHTTPRequestHandler):
    """Forwards to the upstream; fails each distinct request's first ``failures`` times."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real servers: clients reuse connections

    def __init__(self, *args, upstream: str, log_path: str, failures: int, how: str, seen, lock):
        self.upstream, self.log_path, self.failures, self.how = upstream, log_path, failures, how
        self.seen, self.lock = seen, lock
        super().__init__(*args)

    def do_GET(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = f"{self.command} {self.path} {self.headers.get('Range')}"
        with self.lock:
            self.seen[key] += 1
            fail = self.seen[key] <= self.failures
        with open(self.log_path, "a") as log:
            log.write(f"{key} {self.how if fail else 'ok'}\n")
        if fail and self.how in ("reset", "stall"):
            time.sleep(STALL_S if self.how == "stall" else 0)
            return self.reset()
        if fail and self.how == "503":
            return self.answer(503, {}, b"")
        status, headers, data = self.ask_upstream(body)
        if fail:  # cut: the full length announced, half of it sent
            self.answer(status, headers, data, len(data) // 2)
            return self.reset()
        self.answer(status, headers, data)

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def ask_upstream(self, body: bytes) -> tuple[int, dict, bytes]:
        """The upstream's status, headers and body for this request."""
        where = urlsplit(self.upstream)
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
        try:
            conn.request(self.command, self.path, body or None, dict(self.headers.items()))
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def answer(self, status: int, headers: dict, data: bytes, send: int | None = None) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        # A HEAD answer announces the length of the body a GET would have.
        self.send_header("Content-Length", headers.get("Content-Length", str(len(data))))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data[:send])
        self.wfile.flush()

    def reset(self) -> None:
        """Close the connection with a reset (RST), as a crashing server's kernel does."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def log_message(self, format, *args):
        pass


def main() -> None:
    upstream, log_path, failures, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    port = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    assert how in HOWS, f"HOW must be one of {HOWS}"
    handler = partial(
        FlakyProxy,
        upstream=upstream,
        log_path=log_path,
        failures=failures,
        how=how,
        seen=Counter(),
        lock=threading.Lock(),
    )
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)  # listening already: clients can connect
    server.serve_forever()


if __name__ == "__main__":
    main()
