"""The fake model provider (``threadline.testing.FakeProvider``) in a process of its own.

Scenario 10 points threadline's chat agent (in workerd) and the Agents SDK's ``AIChatAgent``
(in the same miniflare) at one such server. It runs apart from the driver so that the
driver's own work (fifty event streams read at once) does not take the interpreter from the
provider's fifty answers, each writing a token every few milliseconds.

``python -m bench.provider`` prints ``ready <base URL>`` and then serves until its standard
input closes; meanwhile it reads commands, one a line:

- ``set <tokens> <first_token_ms> <token_gap_ms>``: how the next answers stream (answers
  ``ok``);
- ``stats``: ``{"requests": n, "max_in_flight": n}`` as JSON since the last ``stats``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from threadline.testing import FakeProvider

ROOT = Path(__file__).resolve().parents[1]


class ProviderProcess:
    """Starts, configures and stops ``python -m bench.provider``."""

    def __init__(self) -> None:
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> str:
        """Start the provider; its base URL (``http://127.0.0.1:N/v1``)."""
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.provider"], cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self._read()
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError(f"the fake provider did not start: {line!r}")
        self.url = line.split(" ", 1)[1]
        return self.url

    def configure(self, tokens: int, first_token_ms: int, token_gap_ms: int) -> None:
        """How the next answers stream: ``tokens`` tokens, the first after
        ``first_token_ms``, then one every ``token_gap_ms``."""
        self._send(f"set {tokens} {first_token_ms} {token_gap_ms}")
        if self._read() != "ok":
            raise RuntimeError("the fake provider refused its settings")

    def stats(self) -> dict[str, Any]:
        """Requests answered and the most answers streamed at once since the last call."""
        self._send("stats")
        return dict(json.loads(self._read()))

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def _send(self, line: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def _read(self) -> str:
        assert self._process is not None and self._process.stdout is not None
        return self._process.stdout.readline().strip()


def main() -> None:
    provider = FakeProvider()
    with provider.serve() as url:
        print(f"ready {url}", flush=True)
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["set"] and len(words) == 4:
                provider.tokens, provider.first_token_ms, provider.token_gap_ms = (
                    int(word) for word in words[1:])
                print("ok", flush=True)
            elif words == ["stats"]:
                with provider._lock:
                    figures = {"requests": len(provider.requests),
                               "max_in_flight": provider.max_in_flight}
                    provider.requests.clear()
                    provider.max_in_flight = provider.in_flight
                print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
