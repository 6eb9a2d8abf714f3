"""Thread routes: the paged list, one Thread's summary, and its history."""

from __future__ import annotations

from threadline.api.body import read_query
from threadline.api.context import ApiContext
from threadline.api.http import Request, Response, model_response
from threadline.api.models import HistoryPage, HistoryQuery, HistoryRecord, ThreadPage, ThreadsQuery
from threadline.api.views import thread_item, thread_summary
from threadline.errors import NotFound
from threadline.threads import outbox, views
from threadline.threads.model import decode_json

#: A summary lists at most this many open submissions (the head first); the count is exact.
OPEN_LISTED = 100


def _thread(ctx: ApiContext, thread_id: str) -> views.ThreadRecord:
    record = views.thread(ctx.storage, thread_id)
    if record is None:
        raise NotFound(f"no thread {thread_id!r}", field="thread")
    return record


async def list_threads(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``GET /v1/spaces/{space}/threads?after=&limit=``: Threads in id order, paged."""
    query = read_query(request, ThreadsQuery)
    # One row past the page says whether another page exists, without a count.
    records = views.threads_page(ctx.storage, after=query.after, limit=query.limit + 1)
    page = records[: query.limit]
    more = len(records) > query.limit
    return model_response(200, ThreadPage(
        threads=[thread_item(record) for record in page],
        next=page[-1].id if more else None,
    ))


async def get_thread(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``GET .../threads/{thread}``: the Thread and its first open submissions in FIFO order."""
    record = _thread(ctx, params["thread"])
    open_items = views.open_submissions(ctx.storage, record.id, limit=OPEN_LISTED)
    return model_response(200, thread_summary(record, open_items))


async def history(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``GET .../threads/{thread}/history?after=N&limit=M``: canonical records in seq order."""
    query = read_query(request, HistoryQuery)
    record = _thread(ctx, params["thread"])
    rows = outbox.read_history(ctx.storage, record.id, after=query.after, limit=query.limit + 1)
    page = rows[: query.limit]
    records = [
        HistoryRecord.model_validate(
            {
                "seq": row["seq"], "record_id": row["record_id"],
                "submission_id": row["submission_id"], "kind": row["kind"],
                "body": decode_json(str(row["body_json"])), "created_at": row["created_at"],
            }
        )
        for row in page
    ]
    more = len(rows) > query.limit
    return model_response(200, HistoryPage(
        thread_id=record.id, records=records, next=records[-1].seq if more else None,
    ))


__all__ = ["get_thread", "history", "list_threads"]
