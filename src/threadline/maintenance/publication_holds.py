"""The required gate in delivery: the Threads a required subscriber is held on, and whether a
Thread may start.

:class:`GateHolds` is the part of :class:`~threadline.maintenance.publication_lane.Publication`
that keeps the gate per Thread. A required subscriber's failed batch holds the Thread of its
first record (:mod:`threadline.maintenance.required_gate`): the cursor goes on over the other
Threads' records, the held Thread's own are delivered on their own at the hold's retry time
(never while it is parked), and the hold is released once they all are. Whether a Thread may
start native work (:meth:`GateHolds.gated_thread`) is then a lookup of its hold and a seek at
the end of its log, whatever the log's length.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from functools import partial

from threadline.clock import Clock
from threadline.config import RuntimeConfig
from threadline.delivery.subscribers import Subscribers, SubscriberSpec
from threadline.errors import DeliveryRefused, ThreadlineError
from threadline.maintenance.required_gate import (
    BACKING_OFF,
    PARKED,
    Hold,
    advance_hold,
    insert_hold,
    mark_hold_reported,
    release_hold,
    thread_page,
    wanted_past,
    write_hold_failed,
)
from threadline.maintenance.subscriber_cursors import (
    SKIP_PERSIST,
    SubscriberRow,
    log_end,
    threads_past,
    write_delivered,
)
from threadline.scheduling import backoff_ms
from threadline.storage.port import Storage
from threadline.threads.records import Record


class GateHolds:
    """The required gate's per-Thread state and the delivery of held Threads (a base of
    :class:`~threadline.maintenance.publication_lane.Publication`, which owns the rows)."""

    _storage: Storage
    _clock: Clock
    _config: RuntimeConfig
    _rng: random.Random
    _specs: Subscribers
    _log: Callable[[str], None]
    _rows: dict[str, SubscriberRow] | None
    #: The Threads each subscriber is held on (read with the rows, then kept).
    _holds: dict[str, dict[str, Hold]]
    _read: dict[str, int]
    batches: dict[str, int]

    @property
    def required(self) -> list[SubscriberSpec]:
        """The declared subscribers that gate native work."""
        return [spec for spec in self._specs if spec.required]

    def rows(self) -> dict[str, SubscriberRow]:
        raise NotImplementedError

    def ready_at(self, name: str, now: int) -> int | None:
        raise NotImplementedError

    def report_parked(self) -> int:
        raise NotImplementedError

    async def _call(
        self, spec: SubscriberSpec, records: list[Record], now: int
    ) -> Exception | None:
        raise NotImplementedError

    def _notify(self) -> None:
        raise NotImplementedError

    def _store(self, row: SubscriberRow) -> None:
        raise NotImplementedError

    def _position(self, row: SubscriberRow) -> int:
        return max(row.cursor, self._read.get(row.name, 0))

    def holds(self, name: str) -> dict[str, Hold]:
        """The Threads subscriber ``name`` is held on, by Thread."""
        self.rows()
        return self._holds.setdefault(name, {})

    def _due_holds(self, name: str, now: int) -> list[Hold]:
        return [hold for hold in self.holds(name).values() if hold.due(now)]

    def gated(self) -> dict[str, str]:
        """The Threads whose native work waits for a required subscriber, each mapped to the
        first such subscriber: for the readout and the parking's report (it reads the log
        past each required subscriber's position; the pass asks :meth:`gated_thread`)."""
        held: dict[str, str] = {}
        if not any(spec.required for spec in self._specs):
            return held
        rows = self.rows()
        end = log_end(self._storage)
        for spec in self.required:
            row = rows.get(spec.name)
            if row is None:
                continue
            for thread_id in self.holds(spec.name):
                held.setdefault(thread_id, spec.name)
            if self._position(row) >= end:
                continue
            for thread_id, kind in threads_past(self._storage, self._position(row)):
                if spec.wants(kind):
                    held.setdefault(thread_id, spec.name)
        return held

    def gated_thread(self, thread_id: str) -> str | None:
        """The first required subscriber that has not consumed a record of ``thread_id`` it
        wants, or None: a hold of that Thread, or a wanted record past the subscriber's
        position (read from the end of the Thread's log, bounded, whatever its length)."""
        required = self.required
        if not required:
            return None
        rows = self.rows()
        for spec in required:
            row = rows.get(spec.name)
            if row is None:
                continue
            if thread_id in self.holds(spec.name) or wanted_past(
                    self._storage, thread_id, self._position(row), spec.kinds):
                return spec.name
        return None

    def gate_opens_at(self, name: str, thread_id: str, now: int) -> int | None:
        """When required subscriber ``name`` can deliver what it owes of ``thread_id``: its
        hold's retry time (None while the hold is parked), else :meth:`ready_at`."""
        hold = self.holds(name).get(thread_id)
        if hold is not None:
            return None if hold.parked else max(now, int(hold.retry_at or now))
        return self.ready_at(name, now)

    def _hold(self, spec: SubscriberSpec, records: list[Record], error: Exception) -> bool:
        """Hold the Thread of the first of ``records`` for ``spec`` after ``error``; False when
        storage refused the hold (the subscriber then backs off as a whole)."""
        now = self._clock.now_ms()
        first = records[0]
        alone = all(record.thread_id == first.thread_id for record in records)
        hold = self._failure(Hold(spec.name, first.thread_id, first.seq, BACKING_OFF, 0,
                                  None, None, None, None, now), error, now, alone=alone)
        try:
            self._storage.transaction(lambda: insert_hold(self._storage, hold))
        except ThreadlineError:
            return False
        self.holds(spec.name)[hold.thread_id] = hold
        self._hold_logged(hold)
        return True

    def _failure(self, hold: Hold, error: Exception, now: int, *, alone: bool) -> Hold:
        """``hold`` after ``error`` delivering its records (``alone``: only its Thread's). A
        refusal parks it only when its Thread's records were delivered alone: one of a batch
        spanning several Threads is tried again at once, alone, so that a refusal of another
        Thread's record never parks this one."""
        refused = isinstance(error, DeliveryRefused)
        detail = (str(error.detail)[:2_000]
                  if isinstance(error, DeliveryRefused) and error.detail is not None else None)
        parked = refused and alone
        retry_at = (None if parked else now if refused
                    else now + backoff_ms(hold.failures, self._config, self._rng))
        return replace(hold, state=PARKED if parked else BACKING_OFF,
                       failures=hold.failures + 1, retry_at=retry_at,
                       error_type=type(error).__name__, error=str(error)[:500], detail=detail,
                       failed_at=now, reported=False)

    def _hold_logged(self, hold: Hold) -> None:
        if hold.parked:
            self.report_parked()
        else:
            self._log(f"threadline: subscriber {hold.name!r} failed to deliver a batch "
                      f"({hold.error_type}); thread {hold.thread_id!r} is held and its "
                      f"records are retried after a backoff")

    async def _catch_up(
        self, spec: SubscriberSpec, row: SubscriberRow, hold: Hold, now: int
    ) -> bool:
        """One batch of the records ``hold`` owes, up to the subscriber's position (what lies
        past it is the cursor's); the hold is released once they are all delivered."""
        position = self._position(row)
        records: list[Record] = []
        seq, done = hold.since_seq, False
        while len(records) < spec.batch and seq - hold.since_seq < SKIP_PERSIST:
            page = thread_page(self._storage, hold.thread_id, seq, spec.batch)
            for pos, record in page:
                if pos > position or len(records) == spec.batch:
                    done = pos > position
                    break
                seq = record.seq + 1
                if spec.wants(record.kind):
                    records.append(record)
            else:
                done = len(page) < spec.batch
                if not done:
                    continue
            break
        if records:
            error = await self._call(spec, records, now)
            if error is not None:
                failed = self._failure(hold, error, self._clock.now_ms(), alone=True)
                with suppress(ThreadlineError):
                    self._storage.transaction(lambda: write_hold_failed(self._storage, failed))
                self.holds(spec.name)[hold.thread_id] = failed
                self._hold_logged(failed)
                return False
        return self._advance(spec, hold, seq, done, position, delivered=bool(records))

    def _advance(
        self, spec: SubscriberSpec, hold: Hold, seq: int, done: bool, position: int, *,
        delivered: bool,
    ) -> bool:
        row = self.rows()[spec.name]
        now = self._clock.now_ms()

        def apply() -> int:
            if not done:
                return advance_hold(self._storage, hold, seq)
            if position > row.cursor:
                # The records the cursor stepped over for this hold are delivered now: the
                # cursor is written past them before the hold goes, or a restart would read
                # them again from the cursor.
                write_delivered(self._storage, spec.name, row.version, row.cursor,
                                through=position, batches=0, now=now)
            return release_hold(self._storage, hold)

        try:
            changed = self._storage.transaction(apply)
        except ThreadlineError:
            return False  # delivered, not recorded: the batch goes again (at least once)
        if changed != 1:
            self._rows = None  # someone else moved it (a redeploy's reset): read it again
            return False
        if done:
            del self.holds(spec.name)[hold.thread_id]
            if position > row.cursor:
                self._read.pop(spec.name, None)
                self._store(replace(row, cursor=position))
        else:
            self.holds(spec.name)[hold.thread_id] = replace(hold, since_seq=seq)
        if delivered:
            self.batches[spec.name] = self.batches.get(spec.name, 0) + 1
        self._notify()
        return delivered

    def _report_parked_holds(self, pending: list[Hold]) -> int:
        reported = 0
        for hold in pending:
            taken = self._storage.transaction(partial(mark_hold_reported, self._storage, hold))
            self.holds(hold.name)[hold.thread_id] = replace(hold, reported=True)
            if taken != 1:
                continue
            reported += 1
            self._log(
                f"threadline: subscriber {hold.name!r} is parked on thread {hold.thread_id!r}: "
                f"its destination refused a batch ({hold.error}); native work of that thread "
                f"waits for it, the other threads' records go on; resume, skip or restart it "
                f"(the operator's subscriber routes), or bump its version"
            )
        return reported


__all__ = ["GateHolds"]
