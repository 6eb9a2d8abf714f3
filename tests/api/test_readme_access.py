"""The "Access" examples of README.md run as written, in front of the in-process API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from api_support import Api, run

from threadline import Application, SystemClock, access
from threadline.api import edge
from threadline.api.http import Request, Response

README = Path(__file__).resolve().parents[2] / "README.md"
KEYS = "k1:" + "r" * 40


def _example(marker: str) -> dict[str, Any]:
    section = README.read_text().split("## Access\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"README's Access section should show one {marker} example"
    namespace: dict[str, Any] = {"__name__": "readme_access"}
    exec(compile(found[0], str(README), "exec"), namespace)
    return namespace


def _get(api: Api, checks: edge.Edge, path: str, headers: dict[str, str]) -> Response:
    async def send(name: str, request: Request) -> Response:
        response = await api.space.handle(request)
        if response.stream is not None:
            await response.stream.aclose()  # type: ignore[attr-defined]
        return response

    return run(checks.serve(Request.from_url("GET", path, headers), send))


def test_the_readme_stream_token_opens_one_threads_stream_only(api: Api) -> None:
    stream_token = _example("def stream_token")["stream_token"]
    token = stream_token(KEYS, "acme", "t1", "42")
    # The example mints on the system clock, as a backend does: the edge checks on it too.
    checks = edge.Edge(edge.EdgeConfig(signing_keys=access.SigningKeys.parse(KEYS)),
                       SystemClock())
    thread = "/v1/spaces/acme/threads"
    assert _get(api, checks, f"{thread}/t1/events?access_token={token}", {}).status == 200
    assert _get(api, checks, f"{thread}/t2/events?access_token={token}", {}).status == 403
    principal = access.verify(token, KEYS, now_ms=SystemClock().now_ms()).principal
    assert principal.subject == "user:42"


def test_the_readme_hook_admits_the_company_and_refuses_strangers(api: Api) -> None:
    app = _example("@app.authorize")["app"]
    assert isinstance(app, Application) and app.authorizer is not None
    checks = edge.Edge(edge.EdgeConfig(authorize=app.authorizer), api.clock)
    header = "cf-access-authenticated-user-email"
    thread = "/v1/spaces/acme/threads/t1"
    assert _get(api, checks, thread, {header: "ann@example.com"}).status == 200
    assert _get(api, checks, thread, {header: "eve@elsewhere.com"}).status == 401
    assert _get(api, checks, thread, {}).status == 401
    maintenance = "/v1/spaces/acme/maintenance"
    assert _get(api, checks, maintenance, {header: "ann@example.com"}).status == 403
    assert _get(api, checks, maintenance, {header: "ops@example.com"}).status == 200
