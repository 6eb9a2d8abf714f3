"""Storage: the one port every other package writes through, and what sits behind it.

:class:`Storage` is the port (SQL statements, transactions, the alarm slot); ``SqliteStorage``
serves it under CPython and ``CloudflareStorage`` over a Durable Object's ``ctx.storage``. The
append-only migrations (:mod:`~threadline.storage.schema`) and the row meter live here too.
"""

from threadline.storage.meter import Meter, MeterReading
from threadline.storage.port import Row, Rows, SqlValue, Storage, chunked
from threadline.storage.schema import MIGRATIONS, SCHEMA_VERSION, migrate, schema_version
from threadline.storage.sqlite import SqliteStorage

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Meter",
    "MeterReading",
    "Row",
    "Rows",
    "SqlValue",
    "SqliteStorage",
    "Storage",
    "chunked",
    "migrate",
    "schema_version",
]
