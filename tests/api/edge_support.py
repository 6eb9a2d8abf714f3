"""The Worker's edge in front of a real space, for the access tests."""

from __future__ import annotations

import json
from typing import Any

from api_support import Api, run

from threadline import access
from threadline.api import edge
from threadline.api.http import Request, Response

API_TOKEN = "the-api-token-" + "a" * 32
KEYS = "k1:" + "s" * 40
ORIGIN = "https://app.example"


class Worker:
    """The edge in front of ``api``'s space (every space name reaches that one object)."""

    def __init__(self, api: Api, *, hook: Any = None, keys: str | None = KEYS,
                 api_token: str | None = API_TOKEN) -> None:
        self.api = api
        self.sent: list[tuple[str, Request]] = []
        self.edge = edge.Edge(edge.EdgeConfig(
            api_token=api_token,
            signing_keys=access.SigningKeys.parse(keys) if keys else None,
            authorize=hook, allowed_origins=frozenset({ORIGIN}),
            max_body_bytes=api.app.config.max_body_bytes), api.clock)

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None,
             headers: dict[str, str] | None = None) -> Response:
        sent = dict(headers or {})
        if token is not None:
            sent["authorization"] = f"Bearer {token}"
        raw = b"" if body is None else json.dumps(body).encode()

        async def send(name: str, request: Request) -> Response:
            self.sent.append((name, request))
            response = await self.api.space.handle(request)
            if response.stream is not None:  # an event stream: keep only its head
                await response.stream.aclose()  # type: ignore[attr-defined]
                return Response(response.status, response.headers, b"")
            return response

        return run(self.edge.serve(Request.from_url(method, path, sent, raw), send))

    def mint(self, **scope: Any) -> str:
        scope.setdefault("space", "acme")
        return access.mint(KEYS, now_ms=self.api.clock.now_ms(), **scope)


T1 = "/v1/spaces/acme/threads/t1"


def problem_of(response: Response, status: int) -> dict[str, Any]:
    assert response.status == status, response.body
    assert response.headers["content-type"] == "application/problem+json"
    return dict(response.json())
