"""The example Worker: one application, its Durable Object class and its entrypoint.

A user's own Worker looks like this: build an ``Application``, then declare the two classes
that ``wrangler.toml`` names.
"""

import threadline
from threadline.worker import ThreadObjectBase, WorkerBase

app = threadline.Application()


class ThreadObject(ThreadObjectBase):
    """Hosts the Threads of one space (the Durable Object class in wrangler.toml)."""

    app = app


class Default(WorkerBase):
    """The Worker's HTTP entrypoint."""

    app = app
