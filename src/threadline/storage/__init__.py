"""Storage: the port, its SQLite and Cloudflare adapters, the schema and the meter."""

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
