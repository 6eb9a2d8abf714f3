"""Thread routes: the paged list, one Thread's summary, and its history.

A Thread exists for reading once it is named. Its row is written by its first admission only,
so before that its summary is empty and its history an empty page (as its event stream opens
and waits): a client can read or subscribe before it submits, and reading writes nothing.
The list shows only Threads something was admitted to.
"""

from __future__ import annotations

from threadline.api.body import read_query
from threadline.api.context import ApiContext
from threadline.api.http import Request, Response, model_response
from threadline.api.models import HistoryPage, HistoryQuery, HistoryRecord, ThreadPage, ThreadsQuery
from threadline.api.views import empty_thread, thread_item, thread_summary
from threadline.threads import delayed, views
from threadline.threads.history import read_history_page
from threadline.threads.model import decode_json

#: A summary lists at most this many open submissions (the head first; the count is exact),
#: and at most this many scheduled ones (the soonest first).
OPEN_LISTED = 100


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
    record = views.thread(ctx.storage, params["thread"])
    scheduled = delayed.of_thread(ctx.storage, params["thread"], limit=OPEN_LISTED)
    if record is None:
        # No row: nothing was ever admitted, so nothing is open either.
        return model_response(200, empty_thread(params["thread"], scheduled))
    open_items = views.open_submissions(ctx.storage, record.id, limit=OPEN_LISTED)
    return model_response(200, thread_summary(record, open_items, scheduled))


async def history(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """``GET .../threads/{thread}/history?after=N&limit=M``: the Thread's log in seq order:
    emitted records and the runtime's own (``submission.settled``, ``approval.requested``,
    ``approval.decided``, ``message.failed``). A page whose first records retention deleted
    names the first one kept (``first_kept``)."""
    query = read_query(request, HistoryQuery)
    thread_id = params["thread"]
    # No lookup of the Thread first: one never written has no records, an empty page.
    # At most ``limit`` records and one page of bytes (PAGE_BYTES): a long log of large
    # records is read a page at a time, however high the client set ``limit``.
    found = read_history_page(ctx.storage, thread_id, after=query.after, limit=query.limit)
    page = found.rows
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
    more = found.more
    # Seqs have no hole but the prefix retention deleted: a page that starts past one says so.
    first_kept = records[0].seq if records and records[0].seq > query.after + 1 else None
    return model_response(200, HistoryPage(
        thread_id=thread_id, records=records, next=records[-1].seq if more else None,
        first_kept=first_kept,
    ))


__all__ = ["get_thread", "history", "list_threads"]
