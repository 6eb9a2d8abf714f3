"""What the Worker checks before a request reaches a space's object.

Pure code, so the same checks run under CPython tests and in workerd. For each request, in this
order:

1. a CORS preflight from an allowed origin is answered at once;
2. health and the OpenAPI document are open;
3. a deployment with no way to authenticate (no API token, no signing keys, no
   ``@app.authorize`` hook) answers 503, never open access;
4. the caller becomes a :class:`~threadline.access.Principal`: a scoped token
   (``Authorization: Bearer tl1...``, or ``?access_token=`` on the events route) verified with
   ``THREADLINE_SIGNING_KEYS``; the API token (``THREADLINE_API_TOKEN``, constant-time, only
   in the ``Authorization`` header: a URL lands in browser history, proxies and request logs)
   as :data:`~threadline.access.OPERATOR`; otherwise the app's hook. No principal: 401 without
   detail. A hook that raises: 500 without detail, logged. An API token shorter than
   :data:`MIN_API_TOKEN_LENGTH` characters serves nothing (503, logged once);
5. unknown routes are 404/405, bad path ids 400, a declared body over the cap 413;
6. the route's capability, space and Thread must be within the principal's reach: else 403,
   saying nothing of what exists;
7. the request is forwarded without the credential (the query token is cut from the URL), with
   any ``threadline-*`` header the client sent dropped and the principal's subject, stream
   key and token lineage set for the object (which refuses a revoked token, see
   :mod:`threadline.api.revocations`).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from threadline.access import (
    INTERNAL_HEADER_PREFIX,
    OPERATOR,
    SIGNING_KEYS_SECRET,
    STREAM_KEY_HEADER,
    SUBJECT_HEADER,
    TOKEN_IDS_HEADER,
    TOKEN_ISSUED_HEADER,
    AccessRequest,
    Authorizer,
    Principal,
    SigningKeys,
    TokenRejected,
    looks_like_token,
    verify,
)
from threadline.api.http import Request, Response
from threadline.api.landing import LANDING_PATHS, landing
from threadline.api.problems import (
    internal_error,
    method_not_allowed,
    not_found,
    problem_from_error,
    typed_problem,
)
from threadline.api.router import check_path_id
from threadline.api.routes import HEALTH_PATH, OPENAPI_PATH, ROUTER, TOKENS_PATH
from threadline.api.tokens import mint_for
from threadline.clock import Clock
from threadline.errors import ApiError

#: Paths answered without a token.
OPEN_PATHS = frozenset({HEALTH_PATH, OPENAPI_PATH})
#: The object that answers the open paths through the Worker.
HEALTH_OBJECT = "threadline:health"
#: The secret holding the API token.
TOKEN_SECRET = "THREADLINE_API_TOKEN"  # noqa: S105 - the name of the secret, not its value
#: Origins (comma-separated, or ``*``) whose pages may read the API's answers (CORS).
ORIGINS_VARIABLE = "THREADLINE_ALLOWED_ORIGINS"
#: The shortest API token the edge serves with: a guessable operator credential is refused
#: outright rather than accepted.
MIN_API_TOKEN_LENGTH = 32
#: The query parameter that carries a scoped token where a header cannot (``EventSource``).
QUERY_TOKEN = "access_token"  # noqa: S105 - a parameter name
#: Headers that describe one hop's framing, not the message: never copied between hops.
HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
_PREFLIGHT_HEADERS = "authorization, content-type, idempotency-key, last-event-id"
_EXPOSED_HEADERS = "location, retry-after"

_log = logging.getLogger("threadline.access")


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    """What the edge knows of the deployment: its secrets, hook and limits."""

    api_token: str | None = None
    signing_keys: SigningKeys | None = None
    #: Why ``THREADLINE_SIGNING_KEYS`` could not be read (never its value), if it could not.
    signing_keys_error: str | None = None
    authorize: Authorizer | None = None
    allowed_origins: frozenset[str] = frozenset()
    max_body_bytes: int = 1_048_576

    @classmethod
    def from_env(
        cls, env: Any, *, authorize: Authorizer | None = None, max_body_bytes: int = 1_048_576
    ) -> EdgeConfig:
        """Read the secrets and variables from a Worker's ``env`` (only strings count)."""

        def text(name: str) -> str | None:
            value = getattr(env, name, None)
            return value if isinstance(value, str) and value else None

        keys: SigningKeys | None = None
        error: str | None = None
        raw_keys = text(SIGNING_KEYS_SECRET)
        if raw_keys is not None:
            try:
                keys = SigningKeys.parse(raw_keys)
            except ValueError as exc:
                error = str(exc)
        origins = frozenset(
            o.strip().rstrip("/") for o in (text(ORIGINS_VARIABLE) or "").split(",") if o.strip()
        )
        return cls(
            api_token=text(TOKEN_SECRET), signing_keys=keys, signing_keys_error=error,
            authorize=authorize, allowed_origins=origins, max_body_bytes=max_body_bytes,
        )

    @property
    def configured(self) -> bool:
        """True if some credential can be accepted at all."""
        return bool(self.api_token or self.signing_keys or self.authorize)

    @property
    def api_token_too_short(self) -> bool:
        """True if the API token is set but shorter than :data:`MIN_API_TOKEN_LENGTH`."""
        return self.api_token is not None and len(self.api_token) < MIN_API_TOKEN_LENGTH


@dataclass(frozen=True, slots=True)
class Forward:
    """A request the edge let through: where it goes and what it carries."""

    #: The space's object (None: the Worker answers it itself, see :meth:`Edge.answer`).
    object_name: str | None
    principal: Principal
    #: The URL without the query token.
    url: str
    #: The request's headers without credentials, hop headers or client-sent
    #: ``threadline-*`` headers, plus the principal's subject and stream key.
    headers: dict[str, str]
    #: Headers to add to the answer (CORS).
    response_headers: dict[str, str] = field(default_factory=dict)


def token_matches(authorization: str | None, secret: str | None) -> bool:
    """True if ``authorization`` is ``Bearer <secret>``; compared in constant time.

    A deployment without a secret accepts no token at all.
    """
    supplied = bearer(authorization)
    return supplied is not None and is_secret(supplied, secret)


def is_secret(credential: str, secret: str | None) -> bool:
    """True if ``credential`` is ``secret``, compared in constant time; never for no secret."""
    return bool(secret) and hmac.compare_digest(credential.encode(), str(secret).encode())


def bearer(authorization: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer <credential>`` header, or None."""
    if not authorization:
        return None
    scheme, _, supplied = authorization.partition(" ")
    if scheme.lower() != "bearer" or not supplied.strip():
        return None
    return supplied.strip()


class Edge:
    """The Worker's checks, over a clock (token lifetimes) and an :class:`EdgeConfig`."""

    def __init__(self, config: EdgeConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self._short_token_logged = False

    def cors_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """CORS headers for an answer to a request with these headers (none when its
        ``Origin`` is not allowed). Credentials are tokens, never cookies, so no
        ``Access-Control-Allow-Credentials``."""
        origin = headers.get("origin")
        allowed = self.config.allowed_origins
        if not origin or not allowed or ("*" not in allowed and origin not in allowed):
            return {}
        return {
            "access-control-allow-origin": "*" if "*" in allowed else origin,
            "access-control-expose-headers": _EXPOSED_HEADERS,
            "vary": "origin",
        }

    async def admit(self, method: str, url: str, headers: Mapping[str, str]) -> Response | Forward:
        """Check one request; a refusal to send as is, or where to forward it."""
        headers = {k.lower(): v for k, v in headers.items()}
        cors = self.cors_headers(headers)
        refused = await self._check(method, url, headers, cors)
        if isinstance(refused, Response):
            refused.headers.update(cors)
        return refused

    async def _check(
        self, method: str, url: str, headers: dict[str, str], cors: dict[str, str]
    ) -> Response | Forward:
        parts = urlsplit(url)
        path = parts.path or "/"
        if method == "OPTIONS" and cors and "access-control-request-method" in headers:
            return _preflight()
        if path in OPEN_PATHS:
            return self._forward(HEALTH_OBJECT, OPERATOR, parts, headers, cors)
        if path in LANDING_PATHS and method in ("GET", "HEAD"):
            return landing(method)
        if not self.config.configured:
            return unconfigured()
        if self.config.api_token_too_short:
            return self._short_api_token()
        found = ROUTER.resolve(method, path)
        route = found.route
        space = found.params.get("space")
        thread = found.params.get("thread")
        takes_query = route is not None and route.query_token
        query_token = _query_token(parts.query) if takes_query else None
        if query_token is not None and not looks_like_token(query_token):
            query_token = None  # the API token is never taken from a URL
        credential = bearer(headers.get("authorization")) or query_token
        try:
            principal = await self._principal(credential, AccessRequest(
                method=method, route=route.operation_id if route else None,
                capability=route.capability if route else None, space=space, thread=thread,
                headers=_visible(headers)))
        except TokenRejected as rejected:
            _log.info("a scoped token was refused: %s", rejected.reason)
            return unauthorized("the token has expired" if rejected.expired else None,
                                query=takes_query, offered=True)
        except _HookFailed:
            return internal_error()
        if principal is None:
            return unauthorized(query=takes_query, offered=credential is not None)
        if route is None:
            if found.allowed:
                return method_not_allowed(method, found.allowed)
            return not_found(path)
        try:
            for name in route.params:
                check_path_id(name, found.params[name])
        except ApiError as error:
            return problem_from_error(error)
        declared = _content_length(headers)
        if declared is not None and declared > self.config.max_body_bytes:
            return body_too_large(self.config.max_body_bytes)
        if route.template == TOKENS_PATH:
            return self._forward(None, principal, parts, headers, cors)
        assert route.capability is not None  # open routes were forwarded above
        if not principal.allows(route.capability, space, thread):
            return forbidden()
        assert space is not None  # every authenticated route but minting names its space
        return self._forward(space, principal, parts, headers, cors)

    def _short_api_token(self) -> Response:
        if not self._short_token_logged:
            self._short_token_logged = True
            _log.error("%s is shorter than %d characters: every authenticated request is"
                       " refused until a longer one is set", TOKEN_SECRET, MIN_API_TOKEN_LENGTH)
        return typed_problem(
            "auth-unconfigured",
            f"the {TOKEN_SECRET} secret is shorter than {MIN_API_TOKEN_LENGTH} characters:"
            " set a longer one")

    async def _principal(
        self, credential: str | None, request: AccessRequest
    ) -> Principal | None:
        config = self.config
        if credential is not None and looks_like_token(credential):
            if config.signing_keys is not None:
                return verify(credential, config.signing_keys, now_ms=self.clock.now_ms()).principal
            if config.signing_keys_error is not None:
                _log.error("%s cannot be read: %s", SIGNING_KEYS_SECRET, config.signing_keys_error)
        elif credential is not None and is_secret(credential, config.api_token):
            return OPERATOR
        if config.authorize is None:
            return None
        try:
            principal = await config.authorize(request)
        except Exception as error:
            _log.exception("the authorize hook raised; the request is refused")
            raise _HookFailed from error
        if principal is not None and not isinstance(principal, Principal):
            _log.error("the authorize hook returned %s, not a Principal or None",
                       type(principal).__name__)
            raise _HookFailed
        return principal

    def _forward(
        self, object_name: str | None, principal: Principal, parts: Any,
        headers: dict[str, str], cors: dict[str, str],
    ) -> Forward:
        kept = {
            k: v for k, v in headers.items()
            if k != "authorization" and k not in HOP_HEADERS
            and not k.startswith(INTERNAL_HEADER_PREFIX)
        }
        if principal.subject is not None:
            kept[SUBJECT_HEADER] = principal.subject
        if principal.stream_key:
            kept[STREAM_KEY_HEADER] = principal.stream_key
        if principal.token is not None and principal.token.ids:
            kept[TOKEN_IDS_HEADER] = ",".join(principal.token.ids)
            kept[TOKEN_ISSUED_HEADER] = str(principal.token.issued_at)
        query = urlencode(
            [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != QUERY_TOKEN]
        )
        url = urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
        return Forward(object_name, principal, url, kept, dict(cors))

    def answer(self, forward: Forward, body: bytes) -> Response:
        """The Worker's own answer to a request it does not forward (``POST /v1/tokens``)."""
        request = Request.from_url("POST", forward.url, forward.headers, body)
        keys = self.config.signing_keys
        try:
            if keys is None:
                response = typed_problem(
                    "auth-unconfigured",
                    f"the {SIGNING_KEYS_SECRET} secret is not set (or cannot be read):"
                    " no token can be minted")
            else:
                response = mint_for(forward.principal, request, keys, self.clock.now_ms())
        except ApiError as error:
            response = problem_from_error(error)
        response.headers.update(forward.response_headers)
        return response

    async def serve(
        self, request: Request, send: Callable[[str, Request], Awaitable[Response]]
    ) -> Response:
        """Everything the Worker does for ``request`` whose body is already read: check it,
        then answer it here or ``send`` it to the object it names. For tests and for
        :mod:`threadline.testing`; the Worker itself streams bodies."""
        url = request.path
        if request.query:
            url += "?" + urlencode([(k, v) for k, vs in request.query.items() for v in vs])
        outcome = await self.admit(request.method, url, request.headers)
        if isinstance(outcome, Response):
            return outcome
        if len(request.body) > self.config.max_body_bytes:
            return body_too_large(self.config.max_body_bytes)
        if outcome.object_name is None:
            return self.answer(outcome, request.body)
        forwarded = Request.from_url(request.method, outcome.url, outcome.headers, request.body)
        response = await send(outcome.object_name, forwarded)
        response.headers.update(outcome.response_headers)
        return response


class _HookFailed(Exception):
    """The authorize hook raised or answered nonsense: the request gets a bare 500."""


def _visible(headers: dict[str, str]) -> dict[str, str]:
    """The headers a hook sees: all the client sent but ``threadline-*`` (reserved)."""
    return {k: v for k, v in headers.items() if not k.startswith(INTERNAL_HEADER_PREFIX)}


def _query_token(query: str) -> str | None:
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == QUERY_TOKEN and value:
            return value
    return None


def _content_length(headers: Mapping[str, str]) -> int | None:
    value = headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


def _preflight() -> Response:
    return Response(204, {
        "access-control-allow-methods": "GET, HEAD, POST",
        "access-control-allow-headers": _PREFLIGHT_HEADERS,
        "access-control-max-age": "600",
    })


def body_too_large(max_body_bytes: int) -> Response:
    """413 for a body above the cap."""
    return typed_problem(
        "payload-too-large", f"bodies are capped at {max_body_bytes} bytes", field="body"
    )


async def read_capped(
    next_chunk: Callable[[], Awaitable[bytes | None]], cap: int
) -> bytes | None:
    """Read a body chunk by chunk (``next_chunk`` returns None at its end).

    Returns None as soon as more than ``cap`` bytes arrived, without pulling another chunk: a
    body sent without a ``Content-Length`` (chunked) is refused without being buffered whole.
    """
    chunks: list[bytes] = []
    total = 0
    while (chunk := await next_chunk()) is not None:
        total += len(chunk)
        if total > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


#: What a 401 asks for: the same words whatever was sent, so none is learnt to be close.
EXPECTED_CREDENTIAL = "send the API token or a scoped token as 'Authorization: Bearer <token>'"
#: What a 401 adds on a route that also takes a scoped token in its URL (EventSource).
EXPECTED_IN_QUERY = f" (or a scoped token as ?{QUERY_TOKEN}=<token>)"


def unauthorized(
    detail: str | None = None, *, query: bool = False, offered: bool = False
) -> Response:
    """401 saying which credential the route expects (``query``: it also takes one in its
    URL) and nothing about what was wrong with the one sent, but expiry (``detail``).
    ``WWW-Authenticate`` names the Bearer scheme, with ``error="invalid_token"`` when a
    credential was ``offered`` (RFC 6750)."""
    challenge = 'Bearer realm="threadline"' + (', error="invalid_token"' if offered else "")
    said = detail if detail is not None else (
        EXPECTED_CREDENTIAL + (EXPECTED_IN_QUERY if query else ""))
    return typed_problem("unauthorized", said, headers={"www-authenticate": challenge})


def forbidden() -> Response:
    """403: valid credentials that do not reach this route, space or Thread. The same words
    whatever was out of reach, so that nothing is learnt about what exists."""
    return typed_problem("forbidden", "these credentials do not open this resource")


def unconfigured() -> Response:
    """503: the deployment has no way to authenticate, so no authenticated route may answer."""
    return typed_problem(
        "auth-unconfigured",
        f"no credentials are configured: set the {TOKEN_SECRET} secret (locally: in"
        f" .dev.vars), {SIGNING_KEYS_SECRET}, or an @app.authorize hook",
    )


__all__ = [
    "HEALTH_OBJECT",
    "HOP_HEADERS",
    "MIN_API_TOKEN_LENGTH",
    "OPEN_PATHS",
    "ORIGINS_VARIABLE",
    "QUERY_TOKEN",
    "TOKEN_SECRET",
    "Authorizer",
    "Edge",
    "EdgeConfig",
    "Forward",
    "bearer",
    "body_too_large",
    "forbidden",
    "is_secret",
    "read_capped",
    "token_matches",
    "unauthorized",
    "unconfigured",
]
