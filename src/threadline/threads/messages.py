"""Outbound messages (``tl_messages``): input one Thread sends to another.

An Attempt only writes the row, in its own transaction, with an id derived from the submission
and the send's place in it (a replay finds the row instead of sending twice). The messages lane
delivers pending rows later, at least once.
"""

from __future__ import annotations

from threadline.storage.port import Storage

_EXISTS = "SELECT 1 AS present FROM tl_messages WHERE id = ?"
_INSERT = (
    "INSERT INTO tl_messages (id, from_thread, from_submission, to_space, to_thread, input_json,"
    " next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO NOTHING"
)


def message_exists(storage: Storage, message_id: str) -> bool:
    """True when ``message_id`` was already written."""
    return storage.exec(_EXISTS, message_id).first() is not None


def enqueue_message(
    storage: Storage,
    *,
    message_id: str,
    from_thread: str,
    from_submission: str,
    to_space: str,
    to_thread: str,
    input_json: str,
    now: int,
) -> bool:
    """Write a pending message due for delivery now; True when this call added it."""
    written = storage.exec(
        _INSERT, message_id, from_thread, from_submission, to_space, to_thread, input_json,
        now, now,
    ).changed
    return written == 1


__all__ = ["enqueue_message", "message_exists"]
