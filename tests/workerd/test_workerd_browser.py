"""The browser flow in real headless Chromium: examples/browser/thread-events.html, served from
a local origin, opens a Thread's event stream on the local workerd runtime with a read token in
``?access_token=`` (``EventSource`` cannot send an ``Authorization`` header) and receives the
Thread's records as they are appended.

The page reports what it sees (``report`` URL parameter) to the same local server that serves
it, so the test observes the browser without a driver protocol. Chromium is Debian's
``chromium`` package at /usr/bin/chromium, installed by the test command's bootstrap
(scripts/_bootstrap.sh, ``bootstrap_browser``); without it these tests fail, they never skip.
Chromium runs in its own process group and is killed in ``finally``; every wait is a bounded
poll.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from workerd_runtime import ROOT, TOKEN, Runtime, wait_for

from threadline import access

CHROMIUM = Path("/usr/bin/chromium")
EXAMPLES = ROOT / "examples"
PAGE = "/browser/thread-events.html"
REPORT = "/report"
SIGNING_KEYS = "k1:" + "browser-test-signing-key-0123456789abcdef"
SPACE = "browser-tests"
#: Chromium's cold start on a busy machine, then the stream's opening (Worker, object, CORS).
OPEN_TIMEOUT_S = 45.0
#: From the POST of the input to its record on the page (the object's alarm runs the echo).
RECORD_TIMEOUT_S = 30.0
#: Flags this machine's network needs, and no profile state shared between runs.
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


#: The line of the page where its deployer lists the Workers it may send its token to.
ALLOWED_LINE = "const ALLOWED_ORIGINS = [];"


class Site(ThreadingHTTPServer):
    """Serves examples/ on 127.0.0.1 and collects what the page POSTs to ``/report``. The page
    is served as its deployer would: with ``allowed_origins`` written into its list."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), partial(_Handler, directory=str(EXAMPLES)))
        self.lock = threading.Lock()
        self.reports: list[dict[str, Any]] = []
        self.allowed_origins: list[str] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def origin(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"

    def clear(self) -> None:
        with self.lock:
            self.reports.clear()

    def seen(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.reports)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [report for report in self.seen() if report.get("type") == kind]


class _Handler(SimpleHTTPRequestHandler):
    server: Site

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != PAGE:
            super().do_GET()
            return
        page = (EXAMPLES / PAGE.lstrip("/")).read_text()
        assert page.count(ALLOWED_LINE) == 1, "the page's ALLOWED_ORIGINS line moved"
        listed = f"const ALLOWED_ORIGINS = {json.dumps(self.server.allowed_origins)};"
        body = page.replace(ALLOWED_LINE, listed).encode()
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.path != REPORT:
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        with self.server.lock:
            self.server.reports.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows the reports themselves when a test fails."""


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    server = Site()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def runtime(
    start_runtime: Callable[..., Runtime], tmp_path_factory: pytest.TempPathFactory, site: Site
) -> Iterator[Runtime]:
    """A runtime whose Worker verifies scoped tokens and lets the site's origin read."""
    started = start_runtime(
        tmp_path_factory.mktemp("browser-state"),
        THREADLINE_SIGNING_KEYS=SIGNING_KEYS,
        THREADLINE_ALLOWED_ORIGINS=site.origin(),
    )
    try:
        started.warm()
        site.allowed_origins = [started.url.rstrip("/")]
        yield started
    finally:
        site.allowed_origins = []
        started.stop()


def page_url(site: Site, runtime: Runtime | str, thread: str, token: str | None, *,
             host: str = "127.0.0.1", report: str = REPORT) -> str:
    """The example page's URL: stream parts in the query, the token in the fragment."""
    base = runtime if isinstance(runtime, str) else runtime.url
    query = urlencode({"base": base, "space": SPACE, "thread": thread, "report": report})
    fragment = f"#access_token={quote(token, safe='')}" if token is not None else ""
    return f"{site.origin(host)}{PAGE}?{query}{fragment}"


@contextmanager
def chromium(
    site: Site, url: str, profile: Path, binary: Path = CHROMIUM
) -> Iterator[Callable[[], str]]:
    """Headless Chromium showing ``url`` (the site's reports cleared first); yields a reader
    of its log. Killed on exit. A missing browser fails the test, naming the package."""
    if not binary.exists():
        pytest.fail(
            f"{binary} is missing: the browser test needs Debian's `chromium` package, which "
            "the test command's bootstrap installs (scripts/test, bootstrap_browser in "
            "scripts/_bootstrap.sh; by hand: apt-get install --no-install-recommends chromium)"
        )
    site.clear()
    log_path = profile / "chromium.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(binary), *CHROMIUM_FLAGS, f"--user-data-dir={profile / 'user-data'}", url],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            # Its own process group, so its renderer and helper processes go with it.
            start_new_session=True,
        )
    try:
        yield lambda: _log_tail(log_path)
    finally:
        _kill_group(process)


def _log_tail(path: Path) -> str:
    """The end of Chromium's log, less the D-Bus noise of a machine without a session bus."""
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join([line for line in lines if "dbus" not in line][-30:])


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def submit_echo(runtime: Runtime, thread: str, text: str) -> str:
    """POST an ``echo`` input with the API token; the submission's id."""
    reply = httpx.post(
        f"{runtime.url}/v1/spaces/{SPACE}/threads/{thread}/submissions",
        json={"agent": "echo", "input": {"text": text}},
        headers={"authorization": f"Bearer {TOKEN}"}, timeout=30,
    )
    assert reply.status_code == 202, reply.text
    return str(reply.json()["id"])


def _echoed(site: Site, text: str) -> dict[str, Any] | None:
    for report in site.of_type("record"):
        body = report["record"]["body"]
        if isinstance(body, dict) and body.get("text") == text:
            return report
    return None


def _context(site: Site, runtime: Runtime, log: Callable[[], str]) -> str:
    return (f"page reports: {site.seen()}\n--- chromium log:\n{log()}\n"
            f"--- workerd log:\n{runtime.output()}")


def test_page_receives_a_thread_record_over_event_source_with_a_read_token(
    site: Site, runtime: Runtime, tmp_path: Path
) -> None:
    thread = "live"
    token = access.mint(SIGNING_KEYS, space=SPACE, thread=thread, capabilities=("read",))
    started = time.monotonic()
    with chromium(site, page_url(site, runtime, thread, token), tmp_path) as log:
        try:
            wait_for(lambda: site.of_type("open") or site.of_type("error"),
                     timeout=OPEN_TIMEOUT_S, what="the page to open its event stream")
            assert site.of_type("open"), "the stream was refused"
            opened = time.monotonic()
            # Submitted once the stream is open: the record reaches the page live.
            text = "hello from the browser"
            submission = submit_echo(runtime, thread, text)
            report = wait_for(lambda: _echoed(site, text), timeout=RECORD_TIMEOUT_S,
                              what="the page to receive the echoed record")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{_context(site, runtime, log)}") from None
    record = report["record"]
    assert record["submission_id"] == submission
    assert report["id"] == str(record["seq"])  # the SSE id is the record's seq
    assert record["body"] == {"role": "assistant", "text": text}
    assert not site.of_type("error")
    assert token not in "\n".join(runtime.log)
    print(f"browser flow: page open {opened - started:.2f} s, "
          f"record on the page {time.monotonic() - opened:.2f} s after the POST")


def _stream_answers(runtime: Runtime, thread: str, since: int) -> list[int]:
    """The statuses the Worker answered to the thread's event stream requests, from the
    runtime's request log (path only: the query string, with the token, is not logged)."""
    path = f"GET /v1/spaces/{SPACE}/threads/{thread}/events "
    return [int(line.split(path, 1)[1].split()[0])
            for line in runtime.log[since:] if path in line]


@pytest.mark.parametrize(
    ("case", "scope", "status"),
    [
        ("another thread", {"space": SPACE, "thread": "someone-else"}, 403),
        ("another space", {"space": "other-space", "thread": "refused"}, 403),
        ("no token", None, 401),
    ],
)
def test_page_without_a_read_token_for_the_thread_receives_nothing(
    site: Site, runtime: Runtime, tmp_path: Path, case: str, scope: dict[str, str] | None,
    status: int,
) -> None:
    thread = "refused"
    # The Thread already holds a record: a stream let in would replay it at once.
    submit_echo(runtime, thread, f"not for this token ({case})")
    token = None if scope is None else access.mint(SIGNING_KEYS, capabilities=("read",), **scope)
    since = len(runtime.log)
    with chromium(site, page_url(site, runtime, thread, token), tmp_path) as log:
        try:
            wait_for(lambda: site.of_type("error") or site.of_type("record"),
                     timeout=OPEN_TIMEOUT_S, what="the page to be refused")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{_context(site, runtime, log)}") from None
        context = _context(site, runtime, log)
    # Refused by the Worker itself (not merely withheld by the browser), and for good.
    assert _stream_answers(runtime, thread, since) == [status], context
    assert site.of_type("error")[0]["closed"] is True, context
    assert not site.of_type("open"), context
    assert not site.of_type("record"), context
    if token is not None:
        assert token not in "\n".join(runtime.log)


def test_page_on_an_origin_not_allowed_receives_nothing(
    site: Site, runtime: Runtime, tmp_path: Path
) -> None:
    """The same page and a valid token, served from ``localhost`` instead of the one allowed
    origin (``127.0.0.1``): the Worker answers the stream, without CORS headers, and the
    browser withholds it from the page."""
    thread = "cross-origin"
    submit_echo(runtime, thread, "not for this origin")
    token = access.mint(SIGNING_KEYS, space=SPACE, thread=thread, capabilities=("read",))
    since = len(runtime.log)
    with chromium(site, page_url(site, runtime, thread, token, host="localhost"), tmp_path) as log:
        try:
            wait_for(lambda: site.of_type("error") or site.of_type("record"),
                     timeout=OPEN_TIMEOUT_S, what="the page to be refused")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{_context(site, runtime, log)}") from None
        context = _context(site, runtime, log)
    assert _stream_answers(runtime, thread, since)[:1] == [200], context
    assert not site.of_type("record"), context
    assert not site.of_type("open"), context


class Elsewhere(ThreadingHTTPServer):
    """A server on an origin the page does not list: records every request it receives."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Recorder)
        self.requests: list[str] = []

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Recorder(BaseHTTPRequestHandler):
    server: Elsewhere

    def _record(self) -> None:
        self.server.requests.append(f"{self.command} {self.path.split('?', 1)[0]}")
        self.send_response(404)
        self.send_header("access-control-allow-origin", "*")
        self.end_headers()

    do_GET = do_POST = do_OPTIONS = _record

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def elsewhere() -> Iterator[Elsewhere]:
    server = Elsewhere()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def dumped_dom(url: str, profile: Path) -> str:
    """The page's DOM once it has loaded, as headless Chromium prints it, the browser gone."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: see bootstrap_browser in scripts/_bootstrap.sh")
    done = subprocess.run(
        [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile / 'user-data'}",
         "--dump-dom", url],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=OPEN_TIMEOUT_S,
        start_new_session=True, check=False,
    )
    return done.stdout.decode(errors="replace")


def test_a_crafted_link_cannot_send_the_token_to_another_origin(
    site: Site, runtime: Runtime, elsewhere: Elsewhere, tmp_path: Path
) -> None:
    thread = "crafted-base"
    token = access.mint(SIGNING_KEYS, space=SPACE, thread=thread, capabilities=("read",))
    with chromium(site, page_url(site, elsewhere.origin, thread, token), tmp_path) as log:
        try:
            refused = wait_for(lambda: site.of_type("error") or site.of_type("open"),
                               timeout=OPEN_TIMEOUT_S, what="the page to refuse the base")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{_context(site, runtime, log)}") from None
    assert refused[0].get("reason") == "base not allowed", site.seen()
    assert elsewhere.requests == []


def test_a_crafted_link_cannot_send_records_to_another_origin(
    site: Site, runtime: Runtime, elsewhere: Elsewhere, tmp_path: Path
) -> None:
    thread = "crafted-report"
    submit_echo(runtime, thread, "a record the page would forward")
    token = access.mint(SIGNING_KEYS, space=SPACE, thread=thread, capabilities=("read",))
    url = page_url(site, runtime, thread, token, report=elsewhere.origin + "/collect")
    dom = dumped_dom(url, tmp_path)
    assert "refused: the report URL is not on this page" in dom, dom[-2_000:]
    assert elsewhere.requests == []


def test_a_missing_browser_fails_naming_the_package_and_the_bootstrap(
    site: Site, tmp_path: Path
) -> None:
    with pytest.raises(pytest.fail.Exception) as failure, chromium(
        site, "about:blank", tmp_path, binary=tmp_path / "no-chromium"
    ):
        pass
    assert "`chromium` package" in str(failure.value)
    assert "bootstrap_browser" in str(failure.value)
