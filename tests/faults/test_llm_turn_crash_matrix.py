"""Crash matrix of an LLM turn: lose the object at every point a chat turn passes, rebuild,
recover, finish.

The agent reads the Thread's earlier messages (``turn.history``), asks the model which tool to
call (a ``turn.http`` request in the step ``plan``), calls the tool over HTTP (the uncertain
step ``lookup``), then streams the model's answer through ``turn.http.stream`` and
``turn.stream`` (the step ``answer``). The model is the test kit's fake provider, the tool a
small server beside it, both reached through ``FakeFetch`` on the object's clock. The provider
turns the first request of each model step away with a 429: ``Retry-After: 30`` for the plan
(waited on a durable timer: the submission suspends) and ``Retry-After: 2`` for the answer
(waited inside the Attempt, then the step streams again under a new id).

The object is lost at every occurrence of every runtime failpoint, on the arrival of each
request (the tool acts before the object is lost: the call's effect happened, its answer never
came back), before each piece of the streamed answer (mid-stream: some deltas written, the
step not committed), halfway through the in-Attempt wait, and while the submission sleeps on
its timer. Invariants, for each case:

* the turn settles exactly once, completed, with ``max_attempts=1``: neither a 429 nor a loss
  spends an Attempt;
* the answer is in the log once, with exactly the text of one try of the model (each try's
  tokens are tagged with its request's number, so text of two tries cannot pass for one), and
  nothing of another try is;
* a live reader of each incarnation's streams sees every stream of the turn but the committed
  one end ``abandoned``, the one lost mid-stream with the text it had; each try streams under
  an id of its own, with text of its own try only. (The simulated loss unwinds the lost
  Attempt in its incarnation, whose readers are told; on the platform a reader's connection
  goes with the object, and the incarnation it reconnects to never knew that stream.);
* a step that finished is not run again, a step lost while its function ran runs once more,
  and the tool call lost in flight becomes an Unknown Outcome: the tool is not called again
  until an operator's retry;
* every request sends the conversation as the first run read it (the history read and the
  plan are journaled);
* each 429 is waited out as long as it asked: the durable wait whatever is lost; the wait in
  the Attempt is memory only, so an Attempt lost during it is followed by one that asks again
  at once;
* the object's alarm invariant holds after every commit and every handler.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from threadline import Application, ManualClock, RuntimeConfig, Turn
from threadline.errors import Evicted
from threadline.fetching import FetchRequest
from threadline.scheduling import RUNTIME_LOCATIONS
from threadline.storage import SqliteStorage
from threadline.testing import (
    Effects,
    FakeAnswer,
    FakeFetch,
    FakeProvider,
    Refusal,
    SettlementLog,
    SimulatedObject,
)
from threadline.threads.history import read_history
from threadline.threads.live_text import LiveState, LiveStreams
from threadline.threads.model import Outcome, SubmissionState, WaitKind
from threadline.threads.records import SUBMISSION_SETTLED

START = 1_700_000_000_000
MODEL_URL = "https://models.example.com/v1/chat/completions"
TOOL_URL = "https://tools.example.com/weather"
TOKENS = 4
#: What the provider asks for in ``Retry-After`` (seconds), per model step.
WAITS = {"plan": 30, "answer": 2}
WARM_UP = "hello there"
#: As many words as the provider answers with tokens, so its tool call asks for all of it.
QUESTION = "weather in Lisbon today"
#: How often the turn under test reaches each runtime failpoint (the warm-up turn before it is
#: not counted). The first Attempt starts the plan and suspends on its timer; the second
#: claims it again, starts and finishes the plan, the tool call and the answer (a step the
#: journal holds as finished is met there, past its failpoints); the user's message is
#: emitted once (the replay finds it in the log).
PASSES = {
    "attempt:claimed": 2,
    "step:started": 4,
    "step:finished": 3,
    "emit:committed": 1,
    # A chat turn here takes no follow-up input (tests/faults/test_followups_crash_matrix.py
    # crashes one that does).
    "followups:joined": 0,
    "settle:before": 1,
    "settle:after": 1,
}
#: What the turn sends, in order: the plan turned away, the plan, the tool call, the answer
#: turned away, the answer.
REQUESTS = ("plan", "plan", "lookup", "answer", "answer")
#: Pieces of the streamed answer: one event per token, the finish event, ``[DONE]``.
PIECES = TOKENS + 2
STEPS = ("plan", "lookup", "answer")
#: Tries of each step's function in a turn without a loss (a 429'd try, then the answered one).
CLEAN_TRIES = {"plan": 2, "lookup": 1, "answer": 2}
TOOL_ACTED = "the tool acted"
_JOURNAL = "SELECT step_key, state FROM tl_journal WHERE submission_id = ?"

Case = tuple[str, Any]
CASES: list[Case] = [
    *((location, n) for location in RUNTIME_LOCATIONS
      for n in range(1, PASSES.get(location, 0) + 1)),
    *(("request", n) for n in range(1, len(REQUESTS) + 1)),
    # Before piece 1 the answer's headers are in and its text stream is open but empty; before
    # piece TOKENS + 1 every delta is written; before PIECES + 1 the body is whole, unended.
    *(("piece", n) for n in range(1, PIECES + 2)),
    ("wait", "inline"),
    ("wait", "timer"),
]


class Model:
    """What the turn under test reaches over HTTP: the fake provider, with a 429 for the first
    answered request of each model step once :meth:`arm` is called and each streamed token
    tagged with its request's number, and the tool; and the losses a case asks for."""

    def __init__(self, clock: ManualClock, effects: Effects) -> None:
        self.provider = FakeProvider(tokens=TOKENS, first_token_ms=300, token_gap_ms=50,
                                     tool="lookup")
        self._handler = self.provider.handler(clock)
        self.fetch = FakeFetch(self.handle)
        self.clock = clock
        self.effects = effects
        self.refuse: dict[str, int] = {}
        #: When each model step was turned away.
        self.refused: dict[str, int] = {}
        self.armed = False
        #: Every request while armed: (step, when, body).
        self.sent: list[tuple[str, int, dict[str, Any]]] = []
        #: The whole text of each streamed answer, by its request's number.
        self.tries: dict[int, str] = {}
        self.lose_on_request: int | None = None
        self.lose_before_piece: int | None = None
        self.pieces = 0

    def arm(self) -> None:
        self.armed = True
        self.refuse = dict(WAITS)

    def _provider(self, request: FetchRequest) -> FakeAnswer:
        answer = self._handler(request)
        assert isinstance(answer, FakeAnswer)  # the fake provider answers at once
        return answer

    def handle(self, request: FetchRequest) -> FakeAnswer:
        body = json.loads(request.body or b"{}")
        if request.url == TOOL_URL:
            return self._tool(body)
        if not self.armed:
            return self._provider(request)
        step = "answer" if body.get("stream") else "plan"
        self.sent.append((step, self.clock.now_ms(), body))
        number = len(self.sent)
        if number == self.lose_on_request:
            raise Evicted("the object is lost while the provider holds the request")
        asked = self.refuse.pop(step, None)
        if asked is not None:
            self.provider.refusals.append(Refusal(429, str(asked)))
            self.refused[step] = self.clock.now_ms()
        answer = self._provider(request)
        if step == "plan" or answer.status != 200:
            return answer
        self.tries[number] = "".join(f"{word}<{number}>" for word in self.provider.words(body))
        return FakeAnswer(answer.status, answer.headers, self._tagged(answer, number))

    def _tool(self, body: dict[str, Any]) -> FakeAnswer:
        answer = FakeAnswer.of_json({"forecast": f"sunny: {body['query']}"})
        if not self.armed:
            return answer
        self.sent.append(("lookup", self.clock.now_ms(), body))
        self.effects.hit(TOOL_ACTED)
        if len(self.sent) == self.lose_on_request:
            raise Evicted("the tool acted; the object is lost before its answer came")
        return answer

    async def _tagged(self, answer: FakeAnswer, number: int) -> AsyncIterator[bytes]:
        """The answer's events, each token tagged ``<number>``; lost where the case says."""
        lose, self.lose_before_piece = self.lose_before_piece, None  # the first answer only
        n = 0
        async for piece in answer.chunks():
            n += 1
            if n == lose:
                raise Evicted("the object is lost in the middle of the model's answer")
            self.pieces = max(self.pieces, n)
            yield _tag(piece, number)
        if n + 1 == lose:
            raise Evicted("the object is lost before the model's answer ended")


def _tag(piece: bytes, number: int) -> bytes:
    line = piece.decode()
    if not line.startswith("data: {"):
        return piece
    event = json.loads(line.removeprefix("data: "))
    delta = event["choices"][0]["delta"]
    if delta.get("content"):
        delta["content"] += f"<{number}>"
    return b"data: " + json.dumps(event).encode() + b"\n\n"


class LosingClock(ManualClock):
    """A manual clock that loses the object halfway through the first sleep of ``lose_in`` ms
    (set by a case): the in-Attempt wait of the answer's ``Retry-After``."""

    lose_in: int | None = None

    async def sleep_until(self, epoch_ms: int) -> None:
        if self.lose_in is not None and epoch_ms - self.now_ms() == self.lose_in:
            half, self.lose_in = self.lose_in // 2, None
            await super().sleep_until(self.now_ms() + half)
            raise Evicted("the object is lost while the Attempt waits out a Retry-After")
        await super().sleep_until(epoch_ms)


class LiveReader:
    """A reader of one incarnation's live streams of a Thread, following them as an event
    stream does: woken by each change, it reads the snapshot (the text so far of each open
    stream, the end of each finished one)."""

    def __init__(self, live: LiveStreams, thread: str) -> None:
        self.live = live
        self.thread = thread
        self.version = -1
        #: Per stream id: the submission writing it, the text seen while it was open, and how
        #: it ended (state, length).
        self.writer: dict[str, str] = {}
        self.text: dict[str, str] = {}
        self.ended: dict[str, tuple[LiveState, int]] = {}
        self.task = asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        while True:
            self.version = self.live.version(self.thread)
            for entry in self.live.snapshot(self.thread):
                self.writer[entry.id] = entry.submission_id
                if entry.state is LiveState.OPEN:
                    self.text[entry.id] = entry.text()
                else:
                    self.ended.setdefault(entry.id, (entry.state, entry.length))
            await self.live.changed(self.thread, self.version)


class Observed(SimulatedObject):
    """The simulated object with a live reader on each incarnation's streams."""

    readers: list[LiveReader]

    async def start(self) -> None:
        await super().start()
        if not hasattr(self, "readers"):
            self.readers = []
        self.readers.append(LiveReader(self.space.runtime.live, "t"))


def build(effects: Effects) -> Application:
    app = Application(RuntimeConfig(max_attempts=1))

    def tracked(name: str, fn: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        """``fn``, counting each try's start, and its end when it raised or returned (a try
        the object was lost in ends neither way)."""

        async def run() -> Any:
            effects.hit(name)
            try:
                value = await fn()
            except Exception:
                effects.hit(f"{name}:raised")
                raise
            effects.hit(f"{name}:returned")
            return value

        return run

    @app.agent("assist")
    async def assist(turn: Turn) -> Any:
        said = turn.input["text"]
        earlier = await turn.history(kinds=["message"], limit=20)
        messages: list[Any] = [{"role": r.body["role"], "content": r.body["text"]}
                               for r in earlier if isinstance(r.body, dict)]
        messages.append({"role": "user", "content": said})
        await turn.emit({"role": "user", "text": said}, kind="message")

        async def plan() -> Any:
            answer = await turn.http.post(MODEL_URL, json={"model": "m", "messages": messages})
            return answer.raise_for_status().json()["choices"][0]["message"]

        call = await turn.step("plan", tracked("plan", plan))
        [tool_call] = call["tool_calls"]
        query = json.loads(tool_call["function"]["arguments"])["query"]

        async def lookup() -> Any:
            answer = await turn.http.post(TOOL_URL, json={"query": query})
            return answer.raise_for_status().json()["forecast"]

        effects.hit("lookup:asked")
        found = await turn.step("lookup", tracked("lookup", lookup), effect="uncertain")
        effects.hit("lookup:answered")
        messages += [call, {"role": "tool", "tool_call_id": tool_call["id"], "content": found}]

        async def answer() -> str:
            async with turn.stream(kind="message", meta={"role": "assistant"}) as reply, \
                    turn.http.stream("POST", MODEL_URL, json={"model": "m", "stream": True,
                                                              "messages": messages}) as model:
                await model.raise_for_status()
                async for line in model.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
                        if delta:
                            await reply.write(delta)
            return reply.text

        text = await turn.step("answer", tracked("answer", answer))
        return {"text": text, "found": found}

    return app


class Run:
    """One object, its warm-up turn done (the history the turn under test reads), and the
    turn under test admitted."""

    def __init__(self) -> None:
        self.effects = Effects()
        self.clock = LosingClock(START)
        self.model = Model(self.clock, self.effects)
        self.obj = Observed(build(self.effects), clock=self.clock, http=self.model.fetch,
                            check_alarm_invariant=True)
        self.warm_up = self.turn = ""
        #: What stood when the object was lost: the effects so far and the turn's journal.
        self.at_loss: dict[str, Any] = {}
        #: The effects when the turn was found an Unknown Outcome, before the operator acted.
        self.at_unknown: dict[str, int] | None = None

    async def begin(self) -> None:
        await self.obj.start()
        self.warm_up = self.obj.admit("t", "assist", {"text": WARM_UP}).id
        await self.obj.run_alarms()
        assert self.obj.submission(self.warm_up).outcome is Outcome.COMPLETED
        self.effects.calls.clear()
        self.model.arm()
        self.turn = self.obj.admit("t", "assist", {"text": QUESTION}).id

    async def lose(self, case: Case) -> None:
        """Lose the object where ``case`` says, noting what stood then."""
        kind, where = case
        if kind == "request":
            self.model.lose_on_request = where
        elif kind == "piece":
            self.model.lose_before_piece = where
        elif case == ("wait", "inline"):
            self.clock.lose_in = WAITS["answer"] * 1000
        elif kind != "wait":
            self.obj.crash_at(kind, where)
        evict = self.obj.evict

        async def noting(**options: Any) -> None:
            if not self.at_loss:
                self.at_loss.update(calls=dict(self.effects.calls), journal=self.journal())
            await evict(**options)

        self.obj.evict = noting  # type: ignore[method-assign]
        if case == ("wait", "timer"):
            await self.obj.run_alarms(until=self.clock.now_ms() + 10_000)
            assert self.obj.submission(self.turn).state is SubmissionState.SUSPENDED
            [timer] = self.obj.waits(self.turn)
            assert timer.kind is WaitKind.TIMER and (timer.wake_at or 0) > self.clock.now_ms()
            await self.obj.evict()

    async def finish(self) -> None:
        """Drive to the end as passes and an operator would (who retries the tool call)."""
        await self.obj.run_alarms()
        if self.obj.submission(self.turn).state is SubmissionState.UNKNOWN:
            self.at_unknown = dict(self.effects.calls)
            self.obj.resolve(self.turn, "retry")
            await self.obj.run_alarms()

    def journal(self) -> dict[str, str]:
        """The turn's journal as the file holds it (read apart: a lost object's storage is
        closed by then)."""
        reader = SqliteStorage(self.obj.path)
        try:
            return {str(row["step_key"]).removeprefix("step:"): str(row["state"])
                    for row in reader.exec(_JOURNAL, self.turn)}
        finally:
            reader.close()

    def rows(self, submission: str) -> list[Any]:
        return [row for row in read_history(self.obj.storage, "t")
                if row["submission_id"] == submission]

    async def end(self) -> None:
        for _ in range(3):
            await asyncio.sleep(0)
        for reader in self.obj.readers:
            assert reader.version == reader.live.version("t"), "a change no reader was woken by"
            reader.task.cancel()
        await asyncio.gather(*(reader.task for reader in self.obj.readers),
                             return_exceptions=True)
        self.obj.close()


def test_the_matrix_covers_every_runtime_failpoint() -> None:
    assert set(PASSES) == set(RUNTIME_LOCATIONS)


def test_a_clean_turn_passes_each_point_as_often_as_declared() -> None:
    run = Run()

    async def go() -> None:
        await run.begin()
        hits = {location: run.obj.hits(location) for location in PASSES}
        await run.finish()
        assert {location: run.obj.hits(location) - hits[location]
                for location in PASSES} == PASSES
        assert tuple(step for step, *_ in run.model.sent) == REQUESTS
        assert run.model.pieces == PIECES
        # Each 429 was waited out as long as it asked.
        at = [when for _, when, _ in run.model.sent]
        assert (at[1] - at[0], at[4] - at[3]) == (WAITS["plan"] * 1000, WAITS["answer"] * 1000)
        assert {step: run.effects.count(step) for step in STEPS} == CLEAN_TRIES
        clean = ("clean", None)
        _streams_as_read_live(run, _answered_once(run, clean), clean)
        _conversation_as_first_read(run, clean)
        done = run.obj.submission(run.turn)
        assert done.outcome is Outcome.COMPLETED and (done.attempts, done.losses) == (1, 0)
        await run.end()

    asyncio.run(go())


@pytest.mark.parametrize("case", CASES, ids=[f"{kind}-{where}" for kind, where in CASES])
def test_lose_the_object_then_recover_and_finish(case: Case, settlements: SettlementLog) -> None:
    run = Run()

    async def go() -> None:
        await run.begin()
        await run.lose(case)
        await run.finish()
        assert run.obj.evictions == 1 and run.at_loss, (case, "the object was lost once")
        _settled_once(run, settlements, case)
        reply = _answered_once(run, case)
        _streams_as_read_live(run, reply, case)
        _steps_across_the_loss(run, case)
        _conversation_as_first_read(run, case)
        _waited_as_asked(run, case)
        await run.end()

    asyncio.run(go())


def _settled_once(run: Run, settlements: SettlementLog, case: Case) -> None:
    done = run.obj.submission(run.turn)
    assert done.state is SubmissionState.SETTLED and done.outcome is Outcome.COMPLETED, (
        case, done)
    for submission in (run.warm_up, run.turn):
        assert settlements.count(submission) == 1, (case, submission)
    # max_attempts=1: no Attempt was charged but the one the turn had.
    assert done.attempts - done.losses == 1, (case, done)
    assert run.obj.alarm_at is None, case


def _answered_once(run: Run, case: Case) -> dict[str, Any]:
    """The answer's record: once in the log, the text of the try that finished, nothing of
    any other try; the turn's result says the same."""
    rows = run.rows(run.turn)
    kinds = [row["kind"] for row in rows]
    assert kinds == ["message", "message", SUBMISSION_SETTLED], (case, kinds)
    user, reply = (json.loads(row["body_json"]) for row in rows[:2])
    assert user == {"role": "user", "text": QUESTION}, case
    finished = max(run.model.tries)
    assert reply["text"] == run.model.tries[finished], (case, reply, run.model.tries)
    for number in set(run.model.tries) - {finished}:
        assert not any(f"<{number}>" in row["body_json"] for row in rows), (case, number)
    assert run.obj.submission(run.turn).result == {"text": reply["text"],
                                                   "found": f"sunny: {QUESTION}"}, case
    return dict(reply)


def _streams_as_read_live(run: Run, reply: dict[str, Any], case: Case) -> None:
    """Each try of the answer streamed under an id of its own, with text of that try only;
    every stream but the committed one was told abandoned."""
    seen: dict[str, str] = {}
    ended: dict[str, tuple[LiveState, int]] = {}
    for reader in run.obj.readers:
        mine = {stream for stream, writer in reader.writer.items() if writer == run.turn}
        assert not mine & set(ended), (case, "a stream id seen twice", mine, ended)
        unended = mine - set(reader.ended)
        assert not unended, (case, "a stream its readers were never told the end of", unended)
        seen.update((stream, reader.text[stream]) for stream in mine & set(reader.text))
        ended.update((stream, reader.ended[stream]) for stream in mine)
    assert set(ended) == set(seen) | {reply["stream"]}, (case, ended, seen)
    assert len(ended) == run.effects.count("answer"), (case, "one stream per try", ended)
    assert ended.pop(reply["stream"]) == (LiveState.CLOSED, len(reply["text"])), case
    tries = run.model.tries.values()
    for stream, (state, length) in ended.items():
        text = seen.get(stream, "")
        assert state is LiveState.ABANDONED, (case, stream, state)
        assert len(text) == length, (case, stream, text, length)
        assert any(whole.startswith(text) for whole in tries), (case, "mixed", text)
    if case[0] == "piece" and case[1] > 1:
        assert any(length for _, length in ended.values()), (case, "lost with text written")


def _steps_across_the_loss(run: Run, case: Case) -> None:
    """A finished step ran no more; one lost while its function ran, once more; the tool
    call lost in flight was an Unknown Outcome and ran again only on the operator's retry."""
    calls, journal = run.at_loss["calls"], run.at_loss["journal"]
    for step in STEPS:
        lost = (calls.get(step, 0) - calls.get(f"{step}:raised", 0)
                - calls.get(f"{step}:returned", 0))
        assert run.effects.count(step) == CLEAN_TRIES[step] + lost, (case, step, calls)
        if journal.get(step) == "finished":
            assert run.effects.count(step) == calls.get(step, 0), (case, step, "ran again")
    in_flight = (calls.get("lookup:asked", 0) > calls.get("lookup:answered", 0)
                 and journal.get("lookup") != "finished")
    assert (run.at_unknown is not None) == in_flight, (case, journal, calls)
    acted = calls.get(TOOL_ACTED, 0)
    if run.at_unknown is not None:
        assert run.at_unknown.get(TOOL_ACTED, 0) == acted, (case, "called while unknown")
    assert run.effects.count(TOOL_ACTED) == acted + (journal.get("lookup") != "finished"), (
        case, calls)


def _conversation_as_first_read(run: Run, case: Case) -> None:
    """Every request sent the history the first run read, and the plan it journaled."""
    [warm_answer] = [json.loads(row["body_json"])["text"] for row in run.rows(run.warm_up)
                     if row["kind"] == "message"
                     and json.loads(row["body_json"])["role"] == "assistant"]
    conversation = [{"role": "user", "content": WARM_UP},
                    {"role": "assistant", "content": warm_answer},
                    {"role": "user", "content": QUESTION}]
    answers = [body["messages"] for step, _, body in run.model.sent if step == "answer"]
    for step, _, body in run.model.sent:
        if step == "plan":
            assert body["messages"] == conversation, (case, body)
        elif step == "answer":
            assert body["messages"][:3] == conversation, (case, body)
            assert len(body["messages"]) == 5 and body["messages"] == answers[0], (case, body)
        else:
            assert body == {"query": QUESTION}, (case, body)


def _waited_as_asked(run: Run, case: Case) -> None:
    """Each model step was tried again no earlier than its 429 asked: the plan's wait is a
    durable timer, which no loss shortens; the answer's is waited in the Attempt, in memory,
    so an Attempt lost while it waits is followed by one that asks again at once."""
    for step, seconds in WAITS.items():
        refused = run.model.refused[step]
        again = min(when for name, when, _ in run.model.sent if name == step and when > refused)
        if case == ("wait", "inline") and step == "answer":
            assert again - refused == seconds * 1000 // 2, (case, step)
        else:
            assert again - refused >= seconds * 1000, (case, step, again - refused)
