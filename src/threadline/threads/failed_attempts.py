"""The errors of a submission's failed Attempts, kept with it: the first and the latest.

``error`` on a submission is its latest failure only; an operator looking at a submission that
failed on its fifth Attempt also wants to know what the first four said (a timeout, then a
429, then the error it died of). So each Attempt that ends with an error, and not by being
lost (:mod:`threadline.threads.losses`) or aborted, adds one entry to the submission's
``failures_json`` and counts one more in ``failures``: its number, type and message, when it
ended, and whether the submission failed with it or when its retry was due.

The list is bounded twice. In entries: the first failure and the :data:`FAILURES_KEPT` ``- 1``
latest are kept; a later failure drops the oldest of the latest (``failures`` still counts it,
so the detail says how many were dropped). In bytes: an entry's message is the error
envelope's, cut at ``MAX_ERROR_MESSAGE_CHARS``, and its type at ``MAX_ERROR_TYPE_CHARS``, so an
entry is at most :data:`MAX_FAILURE_ENTRY_BYTES` of JSON and the whole list at most
:data:`MAX_FAILURES_BYTES`.

The entry is appended by the UPDATE that ends the Attempt (:mod:`threadline.threads.transitions`
writes the row anyway), in SQL, so keeping it costs no statement, no read and no row more.
It is a column of the submission's row, so whatever deletes the submission (the retention
lane) deletes its failures with it.
"""

from __future__ import annotations

from threadline.threads.model import (
    MAX_ERROR_MESSAGE_CHARS,
    MAX_ERROR_TYPE_CHARS,
    JsonValue,
    encode_json,
)

#: Entries a submission keeps: its first failure and the latest ``FAILURES_KEPT - 1``.
FAILURES_KEPT = 10
#: The most bytes of JSON one entry takes. The envelope's message is at most
#: ``MAX_ERROR_MESSAGE_CHARS`` characters and a note of its length, each at most 7 bytes of
#: JSON (a lone surrogate kept as ``\\udc80``, its backslash escaped again); its type at most
#: ``MAX_ERROR_TYPE_CHARS``, each at most 6 (a control character as ``\u0001``); the field
#: names and numbers take under 200 more: 15,480 in all, within this.
MAX_FAILURE_ENTRY_BYTES = 16_384
#: The most bytes of JSON a submission's whole list takes.
MAX_FAILURES_BYTES = FAILURES_KEPT * (MAX_FAILURE_ENTRY_BYTES + 1) + 1

# The SET clause of the UPDATE that ends an Attempt: ``failures`` and ``failures_json`` as
# they are after appending one entry (five times the same parameter: its JSON text), or as
# they were when it is NULL. Once the list is full, its second element (the oldest of the
# latest) goes as the new one comes; the first failure stays.
APPEND_FAILURE = (
    "failures = failures + (? IS NOT NULL), failures_json = CASE"
    " WHEN ? IS NULL THEN failures_json"
    " WHEN failures_json IS NULL THEN json_array(json(?))"
    f" WHEN json_array_length(failures_json) < {FAILURES_KEPT}"
    " THEN json_insert(failures_json, '$[#]', json(?))"
    " ELSE json_insert(json_remove(failures_json, '$[1]'), '$[#]', json(?)) END"
)


def failure_entry(
    error: JsonValue, *, at: int, final: bool, retry_at: int | None
) -> str | None:
    """The JSON text of the entry an Attempt that ended with ``error`` adds (None when
    ``error`` is not an error envelope: nothing is added)."""
    if not isinstance(error, dict) or not isinstance(error.get("type"), str):
        return None
    attempt = error.get("attempt")
    message = error.get("message")
    entry = {
        "attempt": attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        "type": error["type"][:MAX_ERROR_TYPE_CHARS],
        "message": message if isinstance(message, str) else "",
        "at": at,
        "final": final,
        "retry_at": None if final else retry_at,
    }
    text = encode_json(entry, max_depth=None)
    if len(text.encode("utf-8")) > MAX_FAILURE_ENTRY_BYTES:
        # Only an error not made by the envelope (whose message is cut already) gets here.
        entry["message"] = entry["message"][:MAX_ERROR_MESSAGE_CHARS]
        text = encode_json(entry, max_depth=None)
    return text


def append_params(entry_json: str | None) -> tuple[str | None, ...]:
    """The parameters :data:`APPEND_FAILURE` takes, in its order."""
    return (entry_json,) * 5


__all__ = [
    "APPEND_FAILURE",
    "FAILURES_KEPT",
    "MAX_FAILURES_BYTES",
    "MAX_FAILURE_ENTRY_BYTES",
    "append_params",
    "failure_entry",
]
