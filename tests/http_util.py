"""A local HTTP server for the webhook tests: loopback only, a free port, one thread per request."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def local_http_server(handler: type[BaseHTTPRequestHandler], path: str = "/") -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port) until the block ends; yields the URL of ``path``."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True  # a handler held open by a test does not keep the shutdown waiting
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}{path}"
    finally:
        srv.shutdown()
        srv.server_close()
