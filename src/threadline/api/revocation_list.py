"""Revoked scoped tokens: the space's object refuses them on every route, from memory.

A scoped token is checked by the Worker with the signing keys alone, so the Worker cannot know
that one was revoked. The space's object can: the Worker forwards every request made with a
token with the token's lineage (its id and those of the tokens it was minted from, and when
that lineage began, see :class:`threadline.access.TokenLineage`), and the object answers 401
when it has revoked any of them. The object is the only writer of its revocations, so the set
it keeps in memory is never stale: a revocation takes effect on the next request, survives
restarts (``tl_revocations``), and costs a set lookup per request once loaded (one read per
incarnation). An open event stream is cut at its next event or heartbeat.

Two kinds: one token by id, which also revokes every token minted from it; and every token of
one subject whose lineage began before a time. A revocation is kept until every token it can
refuse has expired (a token never outlives its minter, so at most :data:`KEEP_MS` after the
token or the time it names), then dropped when the next one is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from threadline.access import (
    DEFAULT_SKEW,
    MAX_TTL,
    SUBJECT_HEADER,
    TOKEN_IDS_HEADER,
    TOKEN_ISSUED_HEADER,
)
from threadline.api.http import Request
from threadline.api.models import RevocationView, RevokeRequest
from threadline.clock import Clock
from threadline.errors import Conflict, ValidationFailed
from threadline.storage.port import Storage
from threadline.threads.model import valid_subject

#: How long a revocation outlives what it names: the longest a token lives, and clock skew.
KEEP_MS = int((MAX_TTL + DEFAULT_SKEW).total_seconds() * 1000)
#: The most revocations a space keeps in force: a bound on the set every request consults.
MAX_REVOCATIONS = 10_000

_SELECT = (
    "SELECT id, token_id, subject, issued_before, revoked_at, revoked_by, reason"
    " FROM tl_revocations ORDER BY id"
)
_INSERT = (
    "INSERT INTO tl_revocations (token_id, subject, issued_before, revoked_at, revoked_by,"
    " reason) VALUES (?, ?, ?, ?, ?, ?) RETURNING id"
)
# A token revocation ages from when it was made, a subject's from the time it names.
_DROP_EXPIRED = "DELETE FROM tl_revocations WHERE COALESCE(issued_before, revoked_at) <= ?"


@dataclass(frozen=True, slots=True)
class Revocation:
    """One row of ``tl_revocations``."""

    id: int
    token_id: str | None
    subject: str | None
    issued_before: int | None
    revoked_at: int
    revoked_by: str | None
    reason: str | None

    @property
    def kept_until(self) -> int:
        """When every token this revocation refuses has expired (epoch ms)."""
        since = self.issued_before if self.issued_before is not None else self.revoked_at
        return since + KEEP_MS

    def view(self) -> RevocationView:
        """The wire form."""
        return RevocationView(
            id=self.id, token_id=self.token_id, subject=self.subject,
            issued_before=self.issued_before, revoked_at=self.revoked_at,
            revoked_by=self.revoked_by, reason=self.reason, kept_until=self.kept_until)


class Revocations:
    """The space's revocations, loaded once per incarnation and kept current by its writes."""

    def __init__(self, storage: Storage, clock: Clock) -> None:
        self._storage = storage
        self._clock = clock
        self._rows: list[Revocation] | None = None
        self._tokens: set[str] = set()
        self._subjects: dict[str, int] = {}

    def _loaded(self) -> list[Revocation]:
        if self._rows is None:
            rows = [Revocation(**row) for row in self._storage.exec(_SELECT).rows]
            self._rows = []
            for row in rows:
                self._keep(row)
        return self._rows

    def _keep(self, row: Revocation) -> None:
        assert self._rows is not None
        self._rows.append(row)
        if row.token_id is not None:
            self._tokens.add(row.token_id)
        if row.subject is not None and row.issued_before is not None:
            before = self._subjects.get(row.subject, 0)
            self._subjects[row.subject] = max(before, row.issued_before)

    def refuses(self, request: Request) -> bool:
        """True if ``request`` was made with a token this space has revoked."""
        ids = request.header(TOKEN_IDS_HEADER)
        if ids is None:
            return False
        self._loaded()
        if not self._tokens.isdisjoint(ids.split(",")):
            return True
        subject = request.header(SUBJECT_HEADER)
        if subject is None or subject not in self._subjects:
            return False
        issued = request.header(TOKEN_ISSUED_HEADER)
        if issued is None or not issued.isdigit():
            return True  # a lineage without its start cannot show it began after the cut
        return int(issued) * 1000 < self._subjects[subject]

    def in_force(self) -> list[Revocation]:
        """The revocations that still refuse a token, oldest first."""
        now = self._clock.now_ms()
        return [row for row in self._loaded() if row.kept_until > now]

    def revoke(self, wanted: RevokeRequest, revoked_by: str | None) -> Revocation:
        """Write one revocation (and drop those whose tokens have all expired), in one
        transaction; in force for this object's next request."""
        now = self._clock.now_ms()
        if wanted.subject is not None and not valid_subject(wanted.subject):
            raise ValidationFailed("subject must be printable text without surrounding"
                                   " whitespace", field="subject")
        issued_before = None
        if wanted.subject is not None:
            issued_before = now if wanted.issued_before is None else int(wanted.issued_before)
            if issued_before + KEEP_MS <= now:
                raise ValidationFailed(
                    "every token issued that long ago has expired already",
                    field="issued_before")
        if len(self.in_force()) >= MAX_REVOCATIONS:
            raise Conflict(f"this space already holds {MAX_REVOCATIONS} revocations in force;"
                           " rotate the signing key instead")

        def write() -> int:
            self._storage.exec(_DROP_EXPIRED, now - KEEP_MS)
            found = self._storage.exec(
                _INSERT, wanted.token_id, wanted.subject, issued_before, now, revoked_by,
                wanted.reason).first()
            assert found is not None
            return int(found["id"])

        made = Revocation(self._storage.transaction(write), wanted.token_id, wanted.subject,
                          issued_before, now, revoked_by, wanted.reason)
        self._keep(made)
        return made

    async def cut_when_revoked(
        self, request: Request, chunks: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """``chunks`` until the token that opened them is revoked (checked before each one:
        at the latest at the stream's next heartbeat)."""
        try:
            async for chunk in chunks:
                if self.refuses(request):
                    return
                yield chunk
        finally:
            closer: Callable[[], object] | None = getattr(chunks, "aclose", None)
            if closer is not None:
                await closer()  # type: ignore[misc]


__all__ = ["KEEP_MS", "MAX_REVOCATIONS", "Revocation", "Revocations"]
