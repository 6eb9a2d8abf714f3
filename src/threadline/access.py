"""Who may do what: capabilities, principals, and scoped tokens a browser can hold.

Pure code: no platform, no storage. A scoped token is checked with the signing keys alone, so
the Worker's edge needs no round trip and keeps no state to accept one::

    token = threadline.access.mint(
        env.THREADLINE_SIGNING_KEYS, space="acme", thread="t1", capabilities=("read",),
        ttl=timedelta(minutes=15), subject="user:42",
    )

A token reads ``tl1.<key id>.<payload>.<signature>``: the payload is base64url JSON (space,
Thread, capabilities, issue and expiry times, subject, and a random id naming this token) and
the signature HMAC-SHA256 over ``tl1.<key id>.<payload>`` with the key the id names.
``THREADLINE_SIGNING_KEYS`` holds ``<key id>:<secret>`` entries separated by commas; the first
mints, every one verifies, so a token minted before a rotation keeps working until it expires.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from threadline.clock import SystemClock
from threadline.errors import ValidationFailed
from threadline.threads.model import MAX_SUBJECT_CHARS, check_id, check_space_id, valid_subject

#: The secret holding the signing keys of scoped tokens.
SIGNING_KEYS_SECRET = "THREADLINE_SIGNING_KEYS"  # noqa: S105 - the name of the secret
#: Request header the Worker sets on a forwarded request: the principal's subject (the object
#: records it on what the request causes). Any such header a client sends is dropped first.
SUBJECT_HEADER = "threadline-subject"
#: Request header the Worker sets on a forwarded request: the key under which the object counts
#: the principal's open event streams. Absent: the principal is not capped per subject.
STREAM_KEY_HEADER = "threadline-stream-key"
#: Request header the Worker sets on a request made with a scoped token: the ids of the token
#: and of the tokens it was minted from, comma-separated (see :class:`TokenLineage`). The
#: object refuses the request when it has revoked any of them.
TOKEN_IDS_HEADER = "threadline-token-ids"  # noqa: S105 - a header name
#: Request header the Worker sets beside :data:`TOKEN_IDS_HEADER`: when the token's lineage
#: began (epoch seconds), which a revocation of a subject's earlier tokens compares.
TOKEN_ISSUED_HEADER = "threadline-token-issued"  # noqa: S105 - a header name
#: Prefix of every header only the Worker may set on a forwarded request.
INTERNAL_HEADER_PREFIX = "threadline-"

TOKEN_VERSION = "tl1"  # noqa: S105 - the format's version tag
#: The longest token accepted: a bound on the work one request can ask for.
MAX_TOKEN_LENGTH = 2_048
#: The longest lifetime :func:`mint` gives a token.
MAX_TTL = timedelta(days=7)
#: How far the Worker's clock may run behind or ahead of the minting clock.
DEFAULT_SKEW = timedelta(seconds=30)
#: A signing secret shorter than this is refused: HMAC-SHA256 wants 32 bytes of key.
MIN_SECRET_LENGTH = 32

_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_MAX_STREAM_KEY = MAX_SUBJECT_CHARS + 16


class Capability(StrEnum):
    """What a principal may do. Each route needs exactly one (see the OpenAPI document)."""

    READ = "read"
    """Thread summaries, history and the event stream; the list of a space's Threads."""
    SUBMIT = "submit"
    """Submit input to a Thread."""
    DECIDE = "decide"
    """Decide approvals and resolve Unknown Outcomes."""
    ABORT = "abort"
    """Abort submissions."""
    ADMIN = "admin"
    """Maintenance, schedules and minting tokens."""


ALL_CAPABILITIES = frozenset(Capability)


def _capabilities(values: Iterable[str]) -> frozenset[Capability]:
    if isinstance(values, str):
        raise ValueError("capabilities must be a collection of names, not one string")
    found: set[Capability] = set()
    for value in values:
        try:
            found.add(Capability(value))
        except ValueError:
            names = ", ".join(c.value for c in Capability)
            raise ValueError(f"unknown capability {value!r}; use {names}") from None
    return frozenset(found)


def _scope_id(name: str, value: str | None) -> str | None:
    if value is not None:
        try:
            (check_space_id if name == "space" else check_id)(value, field=name)
        except ValidationFailed as refused:
            raise ValueError(refused.message) from None
    return value


def _subject(value: str | None) -> str | None:
    if value is not None and not valid_subject(value):
        raise ValueError(
            f"subject must be printable text of 1 to {MAX_SUBJECT_CHARS} characters, without"
            " surrounding whitespace")
    return value


#: The most tokens a lineage holds (a token, its minter, its minter's minter...): minting
#: from a token that deep is refused, so that every token names all it descends from.
MAX_LINEAGE = 8


@dataclass(frozen=True, slots=True)
class TokenLineage:
    """Where a scoped token comes from: what revoking any of its ancestors must also cut off.

    ``ids`` are the token's own id and those of the tokens it was minted from, oldest first
    (empty for a token minted before tokens had ids); ``issued_at`` is when the oldest of
    them was issued (epoch seconds): a subject's tokens revoked "issued before T" include
    every token minted later from one issued before T.
    """

    ids: tuple[str, ...]
    issued_at: int


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from and what it may do.

    ``space`` None opens every space, ``thread`` None every Thread of the space; a principal
    naming a Thread must name its space. ``subject`` is recorded on what the principal causes
    (admissions, approvals, aborts, resolutions) and keys its share of event streams.
    """

    subject: str | None = None
    capabilities: frozenset[Capability] = ALL_CAPABILITIES
    space: str | None = None
    thread: str | None = None
    #: When the principal's credential stops working (epoch seconds); None: it does not (the
    #: API token, a hook's principal). A token it mints never outlives it.
    expires_at: int | None = None
    #: Counted under this key against ``max_event_streams_per_subject``; derived from the
    #: subject when not given (principals without one share one key). Empty: not capped per
    #: subject (the deployment's own API token, see :data:`OPERATOR`).
    stream_key: str | None = field(default=None, compare=False)
    #: The scoped token this principal holds (None: the API token, a hook's principal).
    token: TokenLineage | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", _capabilities(self.capabilities))
        _scope_id("space", self.space)
        _scope_id("thread", self.thread)
        _subject(self.subject)
        if self.thread is not None and self.space is None:
            raise ValueError("a principal scoped to a Thread must name its space")
        if self.stream_key is None:
            key = "anonymous" if self.subject is None else "subject:" + self.subject
            object.__setattr__(self, "stream_key", key)

    def allows(self, capability: Capability, space: str | None, thread: str | None) -> bool:
        """True if this principal may use ``capability`` on ``space`` / ``thread``.

        A route that names no Thread (a space's Thread list, maintenance) is open only to a
        principal not scoped to one Thread; a route that names no space (minting) only to one
        not scoped to a space.
        """
        if capability not in self.capabilities:
            return False
        if self.space is not None and self.space != space:
            return False
        return self.thread is None or self.thread == thread

    def covers(self, other: Principal) -> bool:
        """True if ``other`` grants nothing this principal lacks (a token it may mint).

        Nothing it lacks includes time and identity: ``other`` expires no later than this
        principal, and a principal with a subject covers only that subject. A principal with
        no subject names any subject only if its credential is not a token (the API token, a
        hook's principal without a subject): a scoped token without a subject mints only
        tokens without one.
        """
        if not other.capabilities <= self.capabilities:
            return False
        if self.space is not None and other.space != self.space:
            return False
        if self.thread is not None and other.thread != self.thread:
            return False
        if self.expires_at is not None and (
            other.expires_at is None or other.expires_at > self.expires_at
        ):
            return False
        if self.subject is not None or self.token is not None:
            return other.subject == self.subject
        return True


#: The holder of the deployment's API token (``THREADLINE_API_TOKEN``): everything, everywhere.
OPERATOR = Principal(stream_key="")


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """What an ``@app.authorize`` hook is asked about: one request at the Worker's edge.

    ``route`` is the operation's name (``"submit"``, ``"streamEvents"``; None when no route
    matches) and ``capability`` what that route needs. ``headers`` are lower-cased.
    """

    method: str
    route: str | None
    capability: Capability | None
    space: str | None
    thread: str | None
    headers: Mapping[str, str]


#: An ``@app.authorize`` hook.
Authorizer = Callable[[AccessRequest], Awaitable["Principal | None"]]


class TokenRejected(Exception):
    """A scoped token does not verify; ``reason`` says why, for logs and tests only (the
    response never does, except for expiry)."""

    def __init__(self, reason: str, *, expired: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.expired = expired


@dataclass(frozen=True, slots=True)
class SigningKeys:
    """The signing keys of scoped tokens: ``current`` mints, every key verifies."""

    current: str
    keys: Mapping[str, bytes]

    @classmethod
    def parse(cls, text: str) -> SigningKeys:
        """Read ``"<key id>:<secret>[,<key id>:<secret>...]"``; the first entry mints.

        Raises ``ValueError`` naming the entry (never the secret) for a bad key id, a secret
        shorter than 32 characters, a repeated key id, or no entry at all.
        """
        if not isinstance(text, str):
            raise ValueError(f"{SIGNING_KEYS_SECRET} must be text")
        keys: dict[str, bytes] = {}
        order: list[str] = []
        for position, entry in enumerate(part.strip() for part in text.split(",")):
            if not entry:
                continue
            key_id, sep, secret = entry.partition(":")
            if not sep or not _KEY_ID.fullmatch(key_id):
                raise ValueError(
                    f"{SIGNING_KEYS_SECRET} entry {position + 1} must read"
                    " <key id>:<secret> with a key id of [A-Za-z0-9_-]{1,32}"
                )
            if len(secret) < MIN_SECRET_LENGTH:
                raise ValueError(
                    f"{SIGNING_KEYS_SECRET} key {key_id!r} is shorter than"
                    f" {MIN_SECRET_LENGTH} characters"
                )
            if key_id in keys:
                raise ValueError(f"{SIGNING_KEYS_SECRET} names key {key_id!r} twice")
            keys[key_id] = secret.encode()
            order.append(key_id)
        if not order:
            raise ValueError(f"{SIGNING_KEYS_SECRET} holds no key")
        return cls(current=order[0], keys=keys)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """Decode unpadded base64url, refusing every text but the one :func:`_b64` writes.

    The last character of a part may carry bits the decoder ignores; left unchecked, several
    token texts would verify as one token, and anything keyed on the text (a deny-list, a
    replay cache, a log search) would miss the others.
    """
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise binascii.Error("not base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise binascii.Error("not the canonical base64url of its bytes")
    return data


def _signature(key: bytes, signed: str) -> bytes:
    return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()


def _keys(secret: str | SigningKeys) -> SigningKeys:
    return secret if isinstance(secret, SigningKeys) else SigningKeys.parse(secret)


def mint(
    secret: str | SigningKeys,
    *,
    space: str,
    thread: str | None = None,
    capabilities: Iterable[str] = (Capability.READ,),
    ttl: timedelta = timedelta(minutes=15),
    subject: str | None = None,
    now_ms: int | None = None,
    stream_key: str | None = None,
    token_id: str | None = None,
    lineage: TokenLineage | None = None,
) -> str:
    """A scoped token for ``space`` (and only ``thread`` when given), valid for ``ttl``.

    ``secret`` is the value of ``THREADLINE_SIGNING_KEYS`` (or parsed :class:`SigningKeys`);
    the first key signs. ``now_ms`` is the minting time in epoch milliseconds (default: the
    system clock; tests pass a ``ManualClock``'s time). ``stream_key``, for a token without a
    subject, names whose share of event streams the token's streams count against (the
    minting principal's, see ``POST /v1/tokens``); default: the token's own. ``token_id``
    names the token (default: 16 random bytes; two tokens minted alike still differ).
    ``lineage`` is the minting token's, for a token minted from another (``POST /v1/tokens``):
    the new token names it, so that revoking any of them revokes the new one too. Raises
    ``ValueError`` for a lineage already :data:`MAX_LINEAGE` deep, and for
    an unknown capability, an id outside ``[A-Za-z0-9._:-]{1,128}``, or a ``ttl`` that is not
    positive or exceeds seven days.
    """
    keys = _keys(secret)
    granted = _capabilities(capabilities)
    if not granted:
        raise ValueError("a token needs at least one capability")
    _scope_id("space", space)
    if space is None:
        raise ValueError("a token must name its space")
    _scope_id("thread", thread)
    _subject(subject)
    if not timedelta(0) < ttl <= MAX_TTL:
        raise ValueError(f"ttl must be positive and at most {MAX_TTL}")
    issued = (SystemClock().now_ms() if now_ms is None else now_ms) // 1000
    if token_id is None:
        token_id = _b64(secrets.token_bytes(16))
    elif not _KEY_ID.fullmatch(token_id):
        raise ValueError("token_id must be 1 to 32 characters of [A-Za-z0-9_-]")
    payload: dict[str, Any] = {
        "jti": token_id,
        "sp": space,
        "cap": sorted(c.value for c in granted),
        "iat": issued,
        "exp": issued + int(ttl.total_seconds()),
    }
    if lineage is not None and lineage.ids:
        if len(lineage.ids) >= MAX_LINEAGE:
            raise ValueError(f"a token descends from at most {MAX_LINEAGE - 1} others")
        payload["anc"] = list(lineage.ids)
        payload["fiat"] = min(lineage.issued_at, issued)
    if thread is not None:
        payload["th"] = thread
    if subject is not None:
        payload["sub"] = subject
    elif stream_key:
        if len(stream_key) > _MAX_STREAM_KEY or not stream_key.isprintable():
            raise ValueError(f"stream_key must be printable text of at most {_MAX_STREAM_KEY}"
                             " characters")
        payload["sk"] = stream_key
    body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    signed = f"{TOKEN_VERSION}.{keys.current}.{body}"
    return f"{signed}.{_b64(_signature(keys.keys[keys.current], signed))}"


def looks_like_token(credential: str) -> bool:
    """True if ``credential`` has the shape of a scoped token (it may still not verify)."""
    return credential.startswith(TOKEN_VERSION + ".")


@dataclass(frozen=True, slots=True)
class Verified:
    """A scoped token that verified: its principal, expiry and issue time (epoch seconds) and
    its id (None for a token minted before tokens had one)."""

    principal: Principal
    expires_at: int
    issued_at: int = 0
    token_id: str | None = None


def verify(
    token: str, secret: str | SigningKeys, *, now_ms: int, skew: timedelta = DEFAULT_SKEW
) -> Verified:
    """Check a scoped token's signature, shape and lifetime; its principal.

    The signature is compared in constant time, and checked before anything in the payload
    is read. Raises :class:`TokenRejected` for a token that is too long, malformed, signed
    with an unknown key or another secret, not yet valid, or expired (``expired`` set) past
    the ``skew`` allowance.
    """
    keys = _keys(secret)
    if len(token) > MAX_TOKEN_LENGTH:
        raise TokenRejected("token too long")
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != TOKEN_VERSION:
        raise TokenRejected("not a threadline token")
    _, key_id, body, signature = parts
    key = keys.keys.get(key_id)
    if key is None:
        raise TokenRejected("unknown key id")
    try:
        supplied = _unb64(signature)
    except (binascii.Error, ValueError):
        raise TokenRejected("signature is not base64url") from None
    expected = _signature(key, f"{TOKEN_VERSION}.{key_id}.{body}")
    if not hmac.compare_digest(supplied, expected):
        raise TokenRejected("bad signature")
    try:
        payload = json.loads(_unb64(body))
        principal, issued, expires, token_id = _principal(payload, signature)
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise TokenRejected("malformed payload") from None
    now_s = now_ms / 1000
    allowance = skew.total_seconds()
    if issued > now_s + allowance:
        raise TokenRejected("issued in the future")
    if expires + allowance <= now_s:
        raise TokenRejected("expired", expired=True)
    return Verified(principal, expires, issued, token_id)


def _principal(payload: Any, signature: str) -> tuple[Principal, int, int, str | None]:
    if not isinstance(payload, dict):
        raise ValueError("payload is not an object")
    issued, expires = payload["iat"], payload["exp"]
    if not all(type(v) is int for v in (issued, expires)) or expires <= issued:
        raise ValueError("bad lifetime")
    if expires - issued > MAX_TTL.total_seconds():
        raise ValueError("lifetime past the bound")
    capabilities = payload["cap"]
    if not isinstance(capabilities, list) or not capabilities:
        raise ValueError("bad capabilities")
    token_id = payload.get("jti")
    if token_id is not None and not (isinstance(token_id, str) and _KEY_ID.fullmatch(token_id)):
        raise ValueError("bad token id")
    ancestors = payload.get("anc", [])
    family_issued = payload.get("fiat", issued)
    if (not isinstance(ancestors, list) or len(ancestors) >= MAX_LINEAGE
            or not all(isinstance(a, str) and _KEY_ID.fullmatch(a) for a in ancestors)
            or (ancestors and token_id is None)
            or type(family_issued) is not int or family_issued > issued):
        raise ValueError("bad lineage")
    own = () if token_id is None else (token_id,)
    lineage = TokenLineage(ids=(*ancestors, *own), issued_at=family_issued)
    subject = payload.get("sub")
    shared = payload.get("sk")
    if shared is not None and (subject is not None or not isinstance(shared, str) or not shared):
        raise ValueError("bad stream key")
    principal = Principal(
        subject=subject,
        capabilities=_capabilities(capabilities),
        space=payload["sp"],
        thread=payload.get("th"),
        expires_at=expires,
        # Without a subject each token is its own principal for the stream cap, unless it was
        # minted by a principal whose share it takes.
        stream_key=None if subject is not None else shared or "token:" + (
            token_id or signature[:22]),
        token=lineage,
    )
    if principal.space is None:
        raise ValueError("no space")
    return principal, issued, expires, token_id


__all__ = [
    "ALL_CAPABILITIES",
    "DEFAULT_SKEW",
    "INTERNAL_HEADER_PREFIX",
    "MAX_LINEAGE",
    "MAX_TOKEN_LENGTH",
    "MAX_TTL",
    "MIN_SECRET_LENGTH",
    "OPERATOR",
    "SIGNING_KEYS_SECRET",
    "STREAM_KEY_HEADER",
    "SUBJECT_HEADER",
    "TOKEN_IDS_HEADER",
    "TOKEN_ISSUED_HEADER",
    "TOKEN_VERSION",
    "AccessRequest",
    "Authorizer",
    "Capability",
    "Principal",
    "SigningKeys",
    "TokenLineage",
    "TokenRejected",
    "Verified",
    "looks_like_token",
    "mint",
    "verify",
]
