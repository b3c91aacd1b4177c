"""A WSGI app served on a loopback port from a thread of this process: the local services that are
not moto (the ParallelCluster API, a cluster's Kubernetes API) start, answer and stop the same way.

Only werkzeug is imported: the local ParallelCluster API is used where moto is not installed
(tests/pcluster, in ParallelCluster's own virtualenv).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from trainrun.local.server_speed import SERVER_POLL_SECONDS

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class LoopbackServer:
    """`app` on `host`:`port` (0: a free port) while started; `what` names it in errors and its thread."""

    def __init__(self, app: WsgiApp, *, what: str, host: str = "127.0.0.1", port: int = 0):
        self._app = app
        self._what = what
        self._host = host
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._server is not None:
            return
        self._server = make_server(self._host, self._port, self._app, threaded=True, request_handler=_QuietHandler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            # The stop waits for the loop to see it: SERVER_POLL_SECONDS, not socketserver's 0.5 s.
            kwargs={"poll_interval": SERVER_POLL_SECONDS},
            name=f"local-{self._what.replace(' ', '-')}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"the local {self._what} is not started")
        return f"http://{self._host}:{self._server.server_port}"


class _QuietHandler(WSGIRequestHandler):
    # A run polls these services every few seconds; one log line per request is noise.
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass
