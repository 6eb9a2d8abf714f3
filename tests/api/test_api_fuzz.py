"""Property-based fuzzing of the object's routes against the OpenAPI document (in process).

Random path ids, query strings and bodies (well-formed, ill-typed and malformed) go to every
documented operation. Whatever arrives: no 5xx, the status is documented for the operation, the
body matches the documented schema for that status, and a refusal writes nothing.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from api_support import Api, make_api
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadline import ManualClock
from threadline.api.routes import ROUTES

ID_CHARS = "abcAZ09._:-"
good_ids = st.sampled_from(
    ["t1", "t2", "t3", "confirm", "acme"] + [f"sub_{n:06d}" for n in range(1, 21)]
)
ids = st.one_of(good_ids, st.text(alphabet=ID_CHARS, min_size=1, max_size=8))
bad_ids = st.sampled_from([".", "..", "a b", "%2F", "x" * 129, "é", ""])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8,
)
fields = st.sampled_from(["input", "agent", "idempotency_key", "reason", "approved", "payload",
                          "action", "result", "extra"])
field_values = st.one_of(json_values, st.sampled_from(["echo", "confirm", "retry", "accept",
                                                       "abort", "k-1", True, False]))
#: Bodies shaped like each operation's model (most of the way valid).
shaped_for: dict[str, Any] = {
    "submit": st.fixed_dictionaries(
        {"input": json_values, "agent": st.sampled_from(["echo", "confirm", "echo", "nope"])},
        optional={"idempotency_key": st.sampled_from(["k-1", "k-2"])},
    ),
    "decideApproval": st.fixed_dictionaries({"approved": st.booleans()},
                                            optional={"payload": json_values}),
    "resolveUnknown": st.fixed_dictionaries(
        {"action": st.sampled_from(["retry", "accept", "abort"])},
        optional={"result": json_values},
    ),
    "abortSubmission": st.fixed_dictionaries({}, optional={"reason": st.none()
                                                            | st.text(max_size=8)}),
}


def bodies_for(operation_id: str) -> Any:
    shaped = shaped_for.get(operation_id, st.just({}))
    generic = st.dictionaries(fields, field_values, max_size=4)
    return st.one_of(
        shaped.map(lambda d: json.dumps(d).encode()),
        shaped.map(lambda d: json.dumps(d).encode()),
        shaped.map(lambda d: json.dumps(d).encode()[:-1]),  # truncated: malformed JSON text
        generic.map(lambda d: json.dumps(d).encode()),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=20),
        st.just(b""),
    )


queries = st.dictionaries(st.sampled_from(["after", "limit", "other"]),
                          st.one_of(st.integers(-5, 2_000).map(str),
                                    st.integers(2**50, 2**70).map(str), st.text(ID_CHARS,
                                                                           max_size=4)),
                          max_size=2)

_api: Api | None = None
_document: dict[str, Any] = {}


def _setup() -> Api:
    global _api
    if _api is None:
        _api = make_api(ManualClock(start_ms=1_700_000_000_000))
        _api.submit("t1", {"text": "a"}, agent="echo")
        _api.submit("t2", {"text": "b"}, agent="confirm")
        _api.drive()
        _document.update(_api.call("GET", "/v1/openapi.json").json())
    return _api


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(route_index=st.integers(0, len(ROUTES) - 1),
       params=st.lists(ids, min_size=4, max_size=4),
       corrupt=st.none() | st.tuples(st.integers(0, 3), bad_ids),
       query=queries, data=st.data())
def test_no_input_breaks_the_documented_contract(
    route_index: int,
    params: list[str],
    corrupt: tuple[int, str] | None,
    query: dict[str, str],
    data: st.DataObject,
) -> None:
    api = _setup()
    route = ROUTES[route_index]
    body = data.draw(bodies_for(route.operation_id))
    if data.draw(st.booleans()):
        # Aim at a submission that exists, in its own Thread.
        rows = api.storage.exec("SELECT id, thread_id FROM tl_submissions ORDER BY id").rows
        row = data.draw(st.sampled_from(rows))
        params[1], params[2] = str(row["thread_id"]), str(row["id"])
    if corrupt is not None:
        params[corrupt[0]] = corrupt[1]
    path = route.template
    for name, value in zip(route.params, params, strict=False):
        path = path.replace("{" + name + "}", value)
    if query:
        path += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    sent = body if route.method == "POST" else b""
    before = api.dump()
    response = api.call(route.method, path, body=sent)
    assert response.status < 500, response.body
    operation = _document["paths"][route.template][route.method.lower()]
    if response.status == 404 and b"no route for" in response.body:
        return  # an id that is not a single path segment makes another path
    assert str(response.status) in operation["responses"], (path, response.status)
    content = operation["responses"][str(response.status)]["content"]
    media = response.headers["content-type"]
    assert media in content
    if response.stream is not None:
        # An event stream never ends: its framing is covered by tests/api/test_api_events.py.
        assert media == "text/event-stream" and response.status == 200
        return
    schema = {**content[media]["schema"], "components": _document["components"]}
    jsonschema.Draft202012Validator(schema).validate(response.json())
    if response.status >= 400:
        assert api.dump() == before
