"""The Python client of the thread API: what a program outside the object uses to reach it.

:class:`Client` and :class:`AsyncClient` speak the HTTP API (httpx, the ``threadline[client]``
extra); :mod:`threadline.client.event_stream` reads a Thread's live event stream and resumes it
after a drop. Nothing here runs inside the Worker.
"""

from threadline.client.clients import (
    AsyncClient,
    Client,
    ThreadEvent,
    WaitTimeout,
    raise_for_problem,
)
from threadline.client.event_stream import StreamedText

__all__ = [
    "AsyncClient", "Client", "StreamedText", "ThreadEvent", "WaitTimeout", "raise_for_problem",
]
