"""A static HTTP server with Range support (stdlib's SimpleHTTPRequestHandler ignores Range).

    python range_server.py DIRECTORY LOGFILE

Serves DIRECTORY on a free 127.0.0.1 port, which it prints on the first line of stdout once it
listens (the server binds port 0 itself, so no other process can take the port in between);
appends ``METHOD PATH RANGE`` per request to LOGFILE so tests can check that readers really
asked for byte ranges. Used by the tests and the benchmark: `start(directory, log)`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeHandler(SimpleHTTPRequestHandler):
    """GET/HEAD with single byte ranges; everything else as SimpleHTTPRequestHandler."""

    log_path: str = os.devnull

    def send_head(self):
        path = self.translate_path(self.path)
        header = self.headers.get("Range")
        with open(self.log_path, "a") as log:
            log.write(f"{self.command} {self.path} {header}\n")
        if not header or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        m = RANGE.match(header)
        if not m:
            self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            return None
        start = int(m[1]) if m[1] else max(size - int(m[2]), 0)
        end = min(int(m[2]), size - 1) if m[1] and m[2] else size - 1
        if start >= size:
            self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            return None
        f = open(path, "rb")  # noqa: SIM115 - closed by the base class after copyfile
        f.seek(start)
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.range_left = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = getattr(self, "range_left", None)
        if left is None:
            return super().copyfile(source, outputfile)
        while left > 0 and (block := source.read(min(left, 1 << 20))):
            outputfile.write(block)
            left -= len(block)

    def log_message(self, format, *args):
        pass


def start(directory: str, log_path: str) -> tuple[subprocess.Popen, str]:
    """Run this server in a subprocess; returns it and its base URL once it listens."""
    proc = subprocess.Popen(
        [sys.executable, __file__, str(directory), str(log_path)], stdout=subprocess.PIPE, text=True
    )
    return proc, f"http://127.0.0.1:{reported_port(proc)}"


def reported_port(proc: subprocess.Popen) -> int:
    """The port a server subprocess printed on its first stdout line after it bound it."""
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise RuntimeError(f"server exited ({proc.wait()}) without reporting its port: {line!r}")
    return int(line)


def main() -> None:
    directory, log_path = sys.argv[1], sys.argv[2]
    RangeHandler.log_path = log_path
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(RangeHandler, directory=directory))
    print(server.server_address[1], flush=True)  # listening already: clients can connect
    server.serve_forever()


if __name__ == "__main__":
    main()
