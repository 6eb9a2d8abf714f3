"""A fake model provider: an OpenAI-compatible chat-completions endpoint, deterministic.

``POST <base>/chat/completions`` answers as an OpenAI-compatible provider does: a
``chat.completion`` object, or with ``"stream": true`` server-sent events of
``chat.completion.chunk`` deltas ending with ``data: [DONE]``. The answer is a function of the
request (it echoes the last user message, cut or repeated to ``tokens`` tokens), so a test can
say what a turn must produce. Latency is set per provider (``first_token_ms``, then
``token_gap_ms`` between tokens); ``refusals`` scripts 429s (with ``Retry-After``) and 5xx
answers for the first requests; with ``tool`` set, a conversation whose last message is the
user's is answered with a call of that tool, and once the tool's result is in, with text.

The same provider serves two ways: :meth:`FakeProvider.handler` answers a
:class:`~threadline.testing.FakeFetch` on the object's clock (CPython tests, no sockets), and
:meth:`FakeProvider.serve` runs it as a real HTTP server on 127.0.0.1 (for workerd and the
bench, on wall time).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from threadline.clock import Clock
from threadline.fetching import FetchRequest
from threadline.testing.fake_fetch import FakeAnswer, Handler

#: What a chat answer is made of when the user said nothing.
_FILLER = "ok"


@dataclass(frozen=True, slots=True)
class Refusal:
    """One scripted refusal: a status (429, 500, 503...) and the ``Retry-After`` it sends."""

    status: int = 429
    retry_after: str | None = None


@dataclass
class FakeProvider:
    """An OpenAI-compatible chat-completions provider for tests and the bench (see the
    module docstring). ``requests`` records every request body it was sent, in order, and
    ``max_in_flight`` the most answers it was sending at once."""

    tokens: int = 20
    first_token_ms: int = 0
    token_gap_ms: int = 0
    refusals: list[Refusal] = field(default_factory=list)
    tool: str | None = None
    model: str = "fake-model"
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: Answers being sent right now, and the most there ever were at once.
    in_flight: int = 0
    max_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- what it answers ---------------------------------------------------------------------

    def words(self, body: dict[str, Any]) -> list[str]:
        """The answer's tokens for a request ``body``: the last user message's words, cut
        or repeated to ``tokens`` of them, each but the first with its leading space."""
        said = _FILLER
        for message in reversed(body.get("messages") or []):
            if isinstance(message, dict) and message.get("role") == "user":
                said = str(message.get("content") or "") or _FILLER
                break
        pool = said.split() or [_FILLER]
        return [(" " if n else "") + pool[n % len(pool)] for n in range(self.tokens)]

    def text(self, body: dict[str, Any]) -> str:
        """The whole answer text for ``body``."""
        return "".join(self.words(body))

    def _begin(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _end(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _take(self, body: dict[str, Any]) -> Refusal | None:
        with self._lock:
            self.requests.append(body)
            return self.refusals.pop(0) if self.refusals else None

    def _calls_tool(self, body: dict[str, Any]) -> bool:
        messages = body.get("messages") or []
        return self.tool is not None and bool(messages) and messages[-1].get("role") == "user"

    def _chunks(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The ``choices`` of each chunk of the streamed answer, in order."""
        if self._calls_tool(body):
            call = {"index": 0, "id": f"call_{len(self.requests)}", "type": "function",
                    "function": {"name": self.tool, "arguments": json.dumps(
                        {"query": self.text(body)})}}
            return [{"delta": {"role": "assistant", "tool_calls": [call]},
                     "finish_reason": None},
                    {"delta": {}, "finish_reason": "tool_calls"}]
        words = self.words(body)
        return [*({"delta": {"role": "assistant", "content": word} if n == 0
                   else {"content": word}, "finish_reason": None}
                  for n, word in enumerate(words)),
                {"delta": {}, "finish_reason": "stop"}]

    def _whole(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._calls_tool(body):
            first = self._chunks(body)[0]["delta"]
            message = {"role": "assistant", "content": None, "tool_calls": first["tool_calls"]}
            reason = "tool_calls"
        else:
            message = {"role": "assistant", "content": self.text(body)}
            reason = "stop"
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion",
                "created": 0, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                "usage": {"prompt_tokens": 1, "completion_tokens": self.tokens,
                          "total_tokens": self.tokens + 1}}

    def _event(self, choice: dict[str, Any]) -> bytes:
        chunk = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion.chunk",
                 "created": 0, "model": self.model, "choices": [{"index": 0, **choice}]}
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    def _plan(self, raw: bytes) -> tuple[int, dict[str, str], list[tuple[int, bytes]]]:
        """Status, headers and the body as (wait in ms before it, bytes) pieces."""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return 400, {"content-type": "application/json"}, [
                (0, b'{"error": {"message": "the body is not a JSON object"}}')]
        refusal = self._take(body)
        if refusal is not None:
            headers = {"content-type": "application/json"}
            if refusal.retry_after is not None:
                headers["retry-after"] = refusal.retry_after
            return refusal.status, headers, [
                (0, json.dumps({"error": {"message": "refused by the script"}}).encode())]
        if not body.get("stream"):
            return 200, {"content-type": "application/json"}, [
                (self.first_token_ms, json.dumps(self._whole(body)).encode())]
        pieces = [(self.first_token_ms if n == 0 else self.token_gap_ms, self._event(choice))
                  for n, choice in enumerate(self._chunks(body))]
        pieces.append((0, b"data: [DONE]\n\n"))
        return 200, {"content-type": "text/event-stream"}, pieces

    # -- how it is reached -------------------------------------------------------------------

    def handler(self, clock: Clock) -> Handler:
        """A :class:`~threadline.testing.FakeFetch` handler: the provider on ``clock``."""

        def answer(request: FetchRequest) -> FakeAnswer:
            status, headers, pieces = self._plan(request.body or b"")

            async def body() -> AsyncIterator[bytes]:
                self._begin()
                try:
                    for wait_ms, piece in pieces:
                        if wait_ms:
                            await clock.sleep_until(clock.now_ms() + wait_ms)
                        yield piece
                finally:
                    self._end()

            return FakeAnswer(status, headers, body())

        return answer

    @contextmanager
    def serve(self) -> Iterator[str]:
        """Serve the provider on 127.0.0.1; yields its base URL (``http://127.0.0.1:N/v1``)."""
        provider = self

        class Answer(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers: dict[str, str] = {}
                if self.path.rstrip("/") != "/v1/chat/completions":
                    status, pieces = 404, [(0, b"{}")]
                else:
                    status, headers, pieces = provider._plan(raw)
                provider._begin()
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for wait_ms, piece in pieces:
                        if wait_ms:
                            time.sleep(wait_ms / 1000)
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass  # the caller went away (a timeout, a cancelled turn)
                finally:
                    provider._end()

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                  daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)


__all__ = ["FakeProvider", "Refusal"]
