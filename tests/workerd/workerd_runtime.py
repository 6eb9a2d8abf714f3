"""Drives the local workerd runtime for the integration tests: start, request, stop."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "workerd-test-token-" + "w" * 32
#: The signing keys of the runtime that accepts scoped tokens (the ``signed`` fixture).
SIGNING_KEYS = "k1:" + "w" * 40
#: Bound on start-up (workerd) and on the first request (Pyodide boot + imports).
START_TIMEOUT_S = 30.0
BOOT_TIMEOUT_S = 60.0


class Response:
    """What the tests need of an HTTP response."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


class Runtime:
    """One workerd process serving the test bundle."""

    def __init__(self, bundle: Path, persist: Path, variables: dict[str, str]) -> None:
        self.bundle = bundle
        self.persist = persist
        self.variables = {"THREADLINE_API_TOKEN": TOKEN, **variables}
        self.url = ""
        self.process: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []

    def start(self) -> None:
        command = [
            "node",
            str(ROOT / "scripts" / "workerd" / "serve.mjs"),
            "--bundle",
            str(self.bundle),
            "--port",
            "0",
            "--persist",
            str(self.persist),
            "--exit-on-stdin-close",
        ]
        for key, value in self.variables.items():
            command += ["--var", f"{key}={value}"]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.url:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("workerd did not start:\n" + self.output())
            try:
                line = self.lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line.startswith("ready "):
                self.url = line.split(" ", 1)[1].strip()

    def _pump(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line.rstrip("\n"))
            self.lines.put(line)

    def output(self) -> str:
        return "\n".join(self.log[-60:])

    def stop(self) -> None:
        """Stop workerd (SIGTERM, then kill after a bound)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def request(
        self,
        path: str,
        *,
        method: str = "GET",
        token: str | None = None,
        timeout: float = 30.0,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        sent = {"authorization": f"Bearer {token}"} if token else {}
        sent.update(headers or {})
        if body is not None:
            sent.setdefault("content-type", "application/json")
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as reply:
                return Response(reply.status, dict(reply.headers), reply.read())
        except urllib.error.HTTPError as error:
            return Response(error.code, dict(error.headers), error.read())

    def probe(self, obj: str, op: str, **args: Any) -> Any:
        query = "&".join(f"{key}={value}" for key, value in args.items())
        reply = self.request(f"/_probe/{obj}/{op}" + (f"?{query}" if query else ""))
        assert reply.status == 200, (reply.status, reply.body, self.output())
        return reply.json()

    def warm(self) -> float:
        """First request: boots Pyodide and imports the app. Returns its duration."""
        started = time.monotonic()
        reply = self.request("/v1/health", timeout=BOOT_TIMEOUT_S)
        assert reply.status == 200, (reply.status, reply.body, self.output())
        return time.monotonic() - started


def wait_for(
    check: Callable[[], Any], *, timeout: float, interval: float = 0.1, what: str = ""
) -> Any:
    """Poll ``check`` until it returns something truthy, for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or check}")
        time.sleep(interval)
