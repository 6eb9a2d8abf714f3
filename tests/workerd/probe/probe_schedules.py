"""Test-only: schedule fire times computed inside workerd, for comparison with CPython.

``/_schedules/fires?expr=&tz=&after=&count=`` answers the next ``count`` fire times of a cron
schedule after ``after`` (epoch ms); ``/_schedules/due?expr=&tz=&stored=&now=`` answers the
coalesced fire; ``/_schedules/declare?expr=&tz=`` answers the declaration's error, if any.
Every answer carries the runtime's Python, Pyodide and tzdata versions and how many time zones
``zoneinfo`` can see.
"""

from __future__ import annotations

import sys
import zoneinfo
from importlib import metadata
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from threadline.errors import InvalidSchedule
from threadline.schedules import CronSchedule

PREFIX = "/_schedules/"


def runtime_facts() -> dict[str, Any]:
    """Which interpreter and time zone data this runtime has."""
    try:
        import pyodide

        pyodide_version = str(pyodide.__version__)
    except ImportError:  # pragma: no cover - always present in workerd
        pyodide_version = ""
    try:
        tzdata_version = metadata.version("tzdata")
    except metadata.PackageNotFoundError:
        tzdata_version = ""
    return {
        "python": sys.version.split()[0],
        "pyodide": pyodide_version,
        "tzdata": tzdata_version,
        "cronsim": metadata.version("cronsim"),
        "tzpath": list(zoneinfo.TZPATH),
        "zones": len(zoneinfo.available_timezones()),
    }


def answer(url: str) -> dict[str, Any]:
    """The answer to one ``/_schedules/`` request."""
    parts = urlsplit(url)
    op = parts.path[len(PREFIX) :]
    args = dict(parse_qsl(parts.query))
    body = runtime_facts()
    if op == "declare":
        try:
            CronSchedule("probe", args["expr"], tz=args["tz"])
            body["error"] = None
        except InvalidSchedule as exc:
            body["error"] = exc.message
        return body
    schedule = CronSchedule("probe", args["expr"], tz=args["tz"])
    if op == "fires":
        after = int(args["after"])
        fires = []
        for _ in range(int(args["count"])):
            after = schedule.next_fire(after)
            fires.append(after)
        body["fires"] = fires
    elif op == "due":
        due = schedule.due(int(args["stored"]), int(args["now"]))
        body["due"] = [due.fire_ms, due.next_ms]
    else:
        body["error"] = f"no op {op}"
    return body
