"""CloudflareStorage in a SQLite-backed Durable Object of real workerd.

Each test runs one experiment in the test-only ``StorageProbe`` object and pins what the
adapter relies on (see the docstring of ``threadline.storage.cloudflare``).
"""

from __future__ import annotations

import itertools
import time

import pytest
from workerd_runtime import Runtime

from threadline.storage import SqliteStorage, migrate

_names = itertools.count()


@pytest.fixture
def obj(workerd: Runtime) -> str:
    """A fresh probe object for each test."""
    return f"storage-{next(_names)}"


def test_rollback_leaves_no_row_and_no_alarm(workerd: Runtime, obj: str) -> None:
    seen = workerd.probe(obj, "rollback", alarm_in="inside")
    assert seen["raised"] == "Boom"  # the body's own exception, unchanged
    assert seen["items"] == 0
    assert seen["alarm"] is None
    assert seen["known_alarm"] is None


def test_alarm_written_after_a_rolled_back_transaction_survives_it(
    workerd: Runtime, obj: str
) -> None:
    # The reason alarm writes go INSIDE the transaction: written right after it, the alarm
    # is committed on its own even though the SQL it belongs to was rolled back.
    seen = workerd.probe(obj, "rollback", alarm_in="after")
    assert seen["items"] == 0
    assert seen["alarm"] == seen["due"]


@pytest.mark.parametrize("alarm_in", ["inside", "after"])
def test_alarm_commits_with_the_sql_of_one_transaction(
    workerd: Runtime, obj: str, alarm_in: str
) -> None:
    seen = workerd.probe(obj, "commit", alarm_in=alarm_in)
    assert seen["items"] == 1
    assert seen["alarm"] == seen["due"]
    assert seen["known_alarm"] == seen["due"]


def test_nested_failure_drops_only_the_inner_writes(workerd: Runtime, obj: str) -> None:
    seen = workerd.probe(obj, "nested")
    assert seen["keys"] == ["outer"]
    assert seen["alarm"] == seen["outer_due"]


def test_js_null_is_normalised_to_none(workerd: Runtime, obj: str) -> None:
    seen = workerd.probe(obj, "nulls")
    assert seen["raw_is_jsnull"] is True  # what workerd hands Python without the adapter
    assert seen["row"] == {"n": None, "p": None, "seven": 7}
    assert seen["types"] == {"n": "NoneType", "p": "NoneType", "seven": "int"}
    assert seen["alarm"] is None


def test_a_changed_row_count_is_read_only_when_asked_and_before_the_next_statement(
    workerd: Runtime, obj: str
) -> None:
    figures = workerd.probe(obj, "meter")
    # Asked for after a later statement: refused, never that statement's count.
    assert figures.pop("late_count") == {"refused": "StorageError"}
    for name, figure in figures.items():
        # A write costs one statement; reading its changed-row count back is one more (0/0),
        # run only once the count is asked for.
        assert figure["statements"] == 1, name
        assert figure["statements_once_asked"] == (1 if name.startswith("select") else 2), name


def test_meter_receives_workerd_billed_counters(workerd: Runtime, obj: str) -> None:
    figures = workerd.probe(obj, "meter")
    figures.pop("late_count")
    for name, figure in figures.items():
        assert figure["meter"] == figure["rows"], name
        assert figure["approximate"] is False, name
        # ``changed`` counts the rows the statement changed, never the index entries.
        assert figure["changed"] == (0 if name.startswith("select") else 1), name
    # workerd's own figures: every index an insert or update touches is a row written.
    assert figures["insert_rowid_table"]["rows"] == [0, 1]
    assert figures["insert_explicit_rowid"]["rows"] == [1, 1]
    assert figures["insert_text_key"]["rows"] == [0, 2]  # its implicit primary-key index
    assert figures["insert_indexed"]["rows"] == [0, 3]  # that index plus one more
    assert figures["update_plain_column"]["rows"] == [1, 1]
    assert figures["update_indexed_column"]["rows"] == [1, 2]
    assert figures["select_by_key"]["rows"] == [1, 0]
    assert figures["delete_by_key"]["rows"] == [1, 1]


def test_the_submissions_rebuild_keeps_rows_and_foreign_keys_in_workerd(
    workerd: Runtime, obj: str
) -> None:
    seen = workerd.probe(obj, "lean-submissions")
    assert seen["steps"] >= 1
    assert seen["kept"] is True
    assert seen["dormant"] == {"queued": 0, "running": 0, "suspended": 1, "unknown": 1,
                               "settled": 0}
    assert seen["orphans"] == 0
    assert seen["refused_now"] is not None and "FOREIGN KEY" in seen["refused_now"]
    assert seen["leftovers"] == []
    # The indexes the latest schema has, built by the rebuild itself, as on sqlite3.
    fresh = SqliteStorage(":memory:")
    migrate(fresh)
    assert seen["indexes"] == {row["name"]: row["sql"] for row in fresh.exec(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index'"
        " AND tbl_name = 'tl_submissions' AND sql IS NOT NULL")}
    # The children's keys point at the rebuilt table, and workerd still enforces them (in a
    # later event: deferred checks end with the commit of the one that migrated).
    refused = workerd.probe(obj, "delete-submission", submission_id="s3")["refused"]
    assert refused is not None and "FOREIGN KEY" in refused


def test_a_rebuild_that_orphans_a_child_fails_in_workerd_and_keeps_the_object(
    workerd: Runtime, obj: str
) -> None:
    seen = workerd.probe(obj, "orphaning-rebuild")
    assert seen["raised"] is not None and "FOREIGN KEY" in seen["raised"], seen
    assert "SchemaError" in seen["raised"]
    rows = {"submissions": ["s1", "s2"], "journal": ["s1"]}
    assert {key: seen[key] for key in rows} == rows
    # The event that failed to migrate committed what it kept: the object was not reset.
    later = workerd.probe(obj, "submissions-and-journal")
    assert later == {"version": seen["version"], **rows}
    assert later["version"] < workerd.probe(obj, "timed-migrate")["version"]


def test_migrating_a_settled_history_to_the_latest_version_in_workerd(
    workerd: Runtime, obj: str
) -> None:
    # A measurement, not a bound: the figures are printed (run with -s to see them).
    seeded = workerd.probe(obj, "seed-settled-history", count=10_000, outbox=2)
    assert seeded["submissions"] == 10_000
    assert seeded["outbox"] == 20_000
    started = time.monotonic()
    seen = workerd.probe(obj, "timed-migrate")
    request_ms = (time.monotonic() - started) * 1000
    assert seen["steps"] >= 1
    # The outbox's records are dropped with it (see schema._ONE_LOG).
    assert (seen["submissions"], seen["outbox"]) == (10_000, None)
    print(f"\nmigrating from version {seeded['version']} to {seen['version']} with 10,000"
          f" settled submissions and 20,000 outbox records: request {request_ms:.0f} ms,"
          f" object clock {seen['object_clock_ms']:.0f} ms, {seen['rows_read']} rows read,"
          f" {seen['rows_written']} rows written, {seen['statements']} statements")
