"""A moto S3 server on a free loopback port, which it prints on the first line of stdout.

    python s3_server.py

It binds port 0 itself (moto_server -p needs a port chosen beforehand, which another process
may take before the server binds it) and serves until terminated.
"""

from __future__ import annotations

import signal

from moto.server import ThreadedMotoServer


def main() -> None:
    stop = [signal.SIGTERM, signal.SIGINT]
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server thread, which inherits it
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()  # returns once the socket is bound and listening
    print(server.get_host_and_port()[1], flush=True)
    signal.sigwait(stop)
    server.stop()


if __name__ == "__main__":
    main()
