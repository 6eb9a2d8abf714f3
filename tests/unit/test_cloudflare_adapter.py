"""CloudflareStorage's pure logic, over a stand-in for ``ctx.storage`` (workerd pins the rest)."""

import asyncio
from typing import Any

import pytest

from threadline.errors import StorageError
from threadline.storage.cloudflare import CloudflareStorage


class FakeJsStorage:
    """Just enough of ``ctx.storage`` to exercise the adapter's own bookkeeping."""

    def __init__(self) -> None:
        self.slot: int | None = None
        self.read_started = asyncio.Event()
        self.release_read = asyncio.Event()
        self.sql = self

    def setAlarm(self, ms: int) -> None:
        self.slot = ms

    def deleteAlarm(self) -> None:
        self.slot = None

    async def getAlarm(self) -> int | None:
        seen = self.slot
        self.read_started.set()
        await self.release_read.wait()
        return seen

    def transactionSync(self, fn: Any) -> None:
        saved = self.slot
        try:
            fn()
        except BaseException:
            self.slot = saved
            raise RuntimeError("Error: transaction rolled back") from None

    def exec(self, sql: str, *params: Any) -> Any:
        raise RuntimeError("SQLITE_ERROR: no such table")


def test_a_write_during_a_slot_read_is_not_overwritten_by_the_older_answer() -> None:
    async def scenario() -> tuple[int | None, int | None]:
        js = FakeJsStorage()
        storage = CloudflareStorage(js)
        reader = asyncio.create_task(storage.get_alarm())
        await js.read_started.wait()
        storage.set_alarm(500)
        js.release_read.set()
        answer = await reader
        return answer, storage.known_alarm()

    assert asyncio.run(scenario()) == (None, 500)


def test_a_failed_transaction_restores_the_known_alarm_and_reraises_the_original() -> None:
    js = FakeJsStorage()
    storage = CloudflareStorage(js)
    storage.set_alarm(100)

    def body() -> None:
        storage.set_alarm(5)
        raise KeyError("original")

    with pytest.raises(KeyError, match="original"):
        storage.transaction(body)
    assert storage.known_alarm() == 100 == js.slot
    assert not storage.in_transaction()


def test_js_errors_become_storage_errors() -> None:
    storage = CloudflareStorage(FakeJsStorage())
    with pytest.raises(StorageError, match="no such table") as info:
        storage.exec("SELECT 1 FROM missing")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_after_commit_runs_once_the_outermost_transaction_commits() -> None:
    storage = CloudflareStorage(FakeJsStorage())
    seen: list[str] = []

    def note(name: str) -> None:
        storage.after_commit(lambda: seen.append(name))

    def inner_refused() -> None:
        note("inner-refused")
        raise KeyError("refused")

    def outer() -> None:
        note("outer")
        storage.transaction(lambda: note("inner"))
        with pytest.raises(KeyError):
            storage.transaction(inner_refused)
        assert seen == []

    storage.transaction(outer)
    assert seen == ["outer", "inner"]

    def outer_refused() -> None:
        storage.transaction(lambda: note("lost"))
        raise KeyError("refused")

    with pytest.raises(KeyError):
        storage.transaction(outer_refused)
    assert seen == ["outer", "inner"]
    with pytest.raises(StorageError, match="transaction"):
        storage.after_commit(lambda: None)
