"""A local HTTP server on 127.0.0.1 in a thread, for the outbound tests: it records each POST
and answers it with what the test says. Every wait is bounded."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    #: When set, the handler waits (at most 10 s) for it before answering.
    hold: threading.Event | None = None


@dataclass
class LocalServer:
    url: str
    received: list[Received]
    answer: Callable[[Received], Answer]


@contextmanager
def local_server(answer: Callable[[Received], Answer] | None = None) -> Iterator[LocalServer]:
    received: list[Received] = []
    state = LocalServer("", received, answer or (lambda _: Answer()))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            request = Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                               self.rfile.read(length))
            received.append(request)
            reply = state.answer(request)
            if reply.hold is not None:
                reply.hold.wait(10)
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            with suppress(OSError):  # the client gave up (a timeout test)
                self.wfile.write(reply.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
