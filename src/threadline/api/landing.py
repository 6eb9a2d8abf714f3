"""What a person opening the Worker's root in a browser reads: what this is, where to go next.

``GET /`` needs no credential and says nothing about the deployment but that it runs
threadline: the health and OpenAPI routes (open too), and the header every other route needs.
"""

from __future__ import annotations

from threadline.api.http import Response
from threadline.api.routes import HEALTH_PATH, OPENAPI_PATH

#: The paths the landing page is served at.
LANDING_PATHS = frozenset({"/"})

_PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>threadline</title>
<style>
body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 3rem auto;
       padding: 0 1rem; color: #1a1a1a; background: #fff; }}
code {{ background: #f2f2f2; padding: 0 .25rem; border-radius: 3px; }}
a {{ color: #0645ad; }}
</style>
</head>
<body>
<h1>threadline</h1>
<p>This Worker runs <strong>durable agent threads</strong>: clients submit input to a Thread
over HTTP, and the space's Durable Object runs each Thread's submissions in order through a
registered agent, surviving restarts and retrying with backoff.</p>
<ul>
<li><a href="{HEALTH_PATH}"><code>{HEALTH_PATH}</code></a>: whether it is up (no credential
needed).</li>
<li><a href="{OPENAPI_PATH}"><code>{OPENAPI_PATH}</code></a>: the whole HTTP API as OpenAPI
3.1 (no credential needed).</li>
<li>Every other route, under <code>/v1/spaces/&lt;space&gt;/</code>, needs
<code>Authorization: Bearer &lt;token&gt;</code>: the deployment's API token or a scoped
token minted with it.</li>
</ul>
</body>
</html>
""".encode()


def landing(method: str) -> Response:
    """The landing page (its headers only for ``HEAD``)."""
    headers = {"content-type": "text/html; charset=utf-8", "cache-control": "no-store"}
    return Response(200, headers, b"" if method == "HEAD" else _PAGE)


__all__ = ["LANDING_PATHS", "landing"]
