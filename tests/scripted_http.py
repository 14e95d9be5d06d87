"""The lifecycle the scripted endpoints share (the model server, the rerank server): a
threaded HTTP server on 127.0.0.1 whose handler reaches the scripted object, started and
stopped as a context manager. A stop also wakes every handler held by a fault."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and closed its connection is expected here


class ScriptedHTTP:
    """Subclasses name their request handler (:meth:`handler`), whose ``scripted``
    attribute is this object once the server starts."""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def __init__(self, port: int = 0) -> None:
        self.requested_port = port
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        handler = type("Handler", (self.handler(),), {"scripted": self})
        httpd = QuietServer(("127.0.0.1", self.requested_port), handler)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])
