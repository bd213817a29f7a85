"""Beyond the OpenAPI document: raw bodies, content types, headers, methods and paths
sent as bytes to the session app, on every route that takes a body.

Every answer must be below 500 and, when an error, OpenAI-shaped with the status as
its code and a message that names no file of the server nor an exception's internals
(a path, a traceback, a codec's message). A malformed body (empty, not JSON, truncated,
wrong content type, wrong top-level type, nested too deep, numbers out of range,
invalid UTF-8, lone surrogates) is a 4xx that says what is wrong. Without a valid key
every path under /teams/ is 401, whether the team exists or not. Afterwards the same
replicas are alive and a chat is still answered. The counts go to the figures file.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import psutil
import pytest

from tests.conftest import API_KEYS, REPO, auth
from tests.platform.test_header_limits import GET, MB, Flood, flood, refused
from tests.platform.test_header_limits import request as raw_request
from tests.reliability.figures import record
from tests.reliability.test_fuzz_api import engine_still_answers, live_replicas

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
MODEL = "tiny-llama"
JSON = "application/json"
CHAT = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": MODEL, "max_tokens": 1, "prompt": "hi"}
RESPONSE = {"model": MODEL, "max_output_tokens": 1, "input": "hi", "store": False}
# (method, path, a valid body): every route of the app that reads a body.
ROUTES = [("POST", "/v1/chat/completions", CHAT), ("POST", "/v1/completions", COMPLETION),
          ("POST", "/teams/fuzz/v1/chat/completions", CHAT),
          ("POST", "/v1/responses", RESPONSE), ("POST", "/teams/fuzz/v1/responses", RESPONSE),
          ("POST", "/v1/prefixes", {"token_ids": [11, 12, 13], "prefix_id": "raw-fuzz"}),
          ("PUT", "/teams/fuzz/context", {"text": "raw fuzz context"}),
          ("POST", "/teams/fuzz/runs", {"spec": {}}),
          ("POST", "/teams/fuzz/runs/run-0000000000000000/resume", {})]
# What an answer may not show: server paths, tracebacks, Python or codec internals.
LEAKS = re.compile(r"/(?:work|home|tmp|usr|site-packages)/|\.py\b|Traceback|codec can't|"
                   r"surrogates not allowed|object has no attribute|NoneType|"
                   r"TextEncodeInput|JSONDecodeError")


@dataclass(frozen=True)
class Case:
    label: str
    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str | bytes] = field(default_factory=dict)  # "": header removed
    expect: tuple[int, ...] = ()  # accepted statuses (empty: any below 500)


def deep(n: int) -> str:
    return "[" * n + "]" * n


def bad_bodies(valid: dict[str, object]) -> Iterator[tuple[str, bytes, str | None, int]]:
    """(label, body, content type, expected status) of malformed bodies."""
    good = json.dumps(valid).encode()
    yield "empty", b"", JSON, 0  # a route that needs a body: 400 or 422
    yield "whitespace", b"  \n", JSON, 400
    yield "not json", b"hello", JSON, 400
    yield "truncated", good[: len(good) // 2], JSON, 400
    yield "trailing garbage", good + b"}", JSON, 400
    yield "two objects", good + good, JSON, 400
    for v in ("[]", '"text"', "42", "null", "true", "[{}]"):
        yield f"top level {v}", v.encode(), JSON, 400
    yield "nested 10000", deep(10000).encode(), JSON, 400
    yield "nested 65 in a field", json.dumps({**valid, "x": json.loads(deep(64))}).encode(), \
        JSON, 400
    yield "huge integer", b'{"max_tokens": ' + b"9" * 5000 + b"}", JSON, 400
    yield "integer over 64 bits", json.dumps({**valid, "seed": 2**64}).encode(), JSON, 400
    yield "float overflow", json.dumps(valid)[:-1].encode() + b', "temperature": 1e999}', \
        JSON, 400
    for const in ("NaN", "Infinity", "-Infinity"):
        yield f"constant {const}", json.dumps(valid)[:-1].encode() + \
            f', "temperature": {const}}}'.encode(), JSON, 400
    yield "invalid utf-8", good[:-1] + b', "x": "\xff\xfe"}', JSON, 400
    yield "utf-8 encoded surrogate", good[:-1] + b', "x": "\xed\xa0\x80"}', JSON, 400
    yield "lone surrogate in a string", json.dumps({**valid, "x": "a\ud800b"}).encode(), \
        JSON, 400
    yield "lone surrogate in a key", json.dumps({**valid, "\udfff": 1}).encode(), JSON, 400
    yield "lone surrogate in a message", json.dumps({**valid, "messages": [
        {"role": "user", "content": "\ud83d"}], "prompt": "\udc00"}).encode(), JSON, 400
    yield "utf-16", json.dumps(valid).encode("utf-16"), JSON, 400
    yield "utf-8 BOM", b"\xef\xbb\xbf" + good, JSON, 400
    yield "no content type", good, None, 415
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                  "application/xml", "application/json; charset=latin-1", "json", "*/*",
                  ";;;", "application/jsonx"):
        yield f"content type {ctype!r}", good, ctype, 415
    yield "content type +json", good, "application/vnd.granikv+json", 0
    yield "content type with utf-8 charset", good, "application/json; charset=UTF-8", 0


def wrong_fields(valid: dict[str, object]) -> Iterator[tuple[str, dict[str, object]]]:
    """Well-formed JSON objects with values of the wrong type or range."""
    for key, value in [("model", 5), ("model", "no-such-model"), ("messages", "hi"),
                       ("messages", [1]), ("messages", [{"role": 5, "content": "x"}]),
                       ("messages", [{"role": "user"}]), ("messages", []),
                       ("prompt", [[-1]]), ("prompt", [10**12]), ("prompt", [999999]),
                       ("prompt", {}), ("max_tokens", -1), ("max_tokens", "many"),
                       ("n", 0), ("temperature", -1), ("top_p", 2), ("stream", "yes"),
                       ("stream_options", "x"), ("stop", [1]), ("logit_bias", {"x": 1}),
                       ("logprobs", 1000), ("prompt_logprobs", 100), ("seed", -(2**63)),
                       ("tools", "x"), ("tools", [{"type": "function"}]),
                       ("response_format", {"type": "nope"}), ("vllm_xargs", []),
                       ("vllm_xargs", {"granikv_prefix_id": 5}), ("token_ids", "x"),
                       ("token_ids", [-5]), ("prefix_id", "../x"), ("text", 5),
                       ("spec", []), (" ", None)]:
        yield f"{key}={json.dumps(value)[:30]}", {**valid, key: value}


def body_cases() -> Iterator[Case]:
    for method, path, valid in ROUTES:
        for label, body, ctype, status in bad_bodies(valid):
            headers = {"Content-Type": ctype} if ctype is not None else {}
            expect = (status,) if status else ()
            if label == "empty" and path.endswith("/resume"):
                expect = ()  # needs no body
            yield Case(f"{method} {path}: {label}", method, path, body, headers, expect)
        for label, body_obj in wrong_fields(valid):
            yield Case(f"{method} {path}: {label}", method, path,
                       json.dumps(body_obj).encode(), {"Content-Type": JSON})


def header_cases() -> Iterator[Case]:
    body = json.dumps(CHAT).encode()
    key = API_KEYS["fuzz"]
    for label, headers, expect in [
            ("no Authorization", {"Authorization": ""}, (401,)),
            ("Bearer without a key", {"Authorization": "Bearer"}, (401,)),
            ("a key sent as Basic", {"Authorization": f"Basic {key}"}, (401,)),
            ("a long unknown key", {"Authorization": "Bearer " + "k" * 8000}, (401,)),
            ("latin-1 bytes in the key", {"Authorization": b"Bearer gk-\xe9\xff"}, (401,)),
            ("a key and a tab", {"Authorization": f"Bearer {key}\tx"}, (401,)),
            ("lower-case scheme", {"Authorization": f"bearer {key}"}, (200,)),
            ("team header of another team", {"X-GraniKV-Team": "red"}, (403,)),
            ("team header not a team name", {"X-GraniKV-Team": "../red"}, (400,)),
            ("team header not a name", {"X-GraniKV-Team": "-"}, (400,)),
            ("team header latin-1", {"X-GraniKV-Team": b"r\xe9d"}, (400,)),
            ("Accept: text/html", {"Accept": "text/html"}, (200,)),
            ("Content-Encoding: gzip", {"Content-Encoding": "gzip"}, ()),
            ("Content-Type twice", {"Content-Type": "application/json, text/plain"}, (415,))]:
        base = {"Content-Type": JSON, "Authorization": f"Bearer {key}"}
        yield Case(f"header: {label}", "POST", "/v1/chat/completions", body,
                   {**base, **headers}, expect)


def method_and_path_cases() -> Iterator[Case]:
    paths = ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/prefixes",
             "/v1/prefixes/raw-fuzz", "/teams", "/teams/fuzz/context",
             "/teams/fuzz/v1/chat/completions", "/teams/fuzz/runs", "/metrics", "/healthz"]
    for path in paths:
        # (A method that HTTP does not define is refused by the HTTP server, before the
        # app: 400 "Invalid HTTP request received.", not an OpenAI error.)
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE"):
            yield Case(f"{method} {path}", method, path)
    for path in ["/", "/v2/chat/completions", "/teams/", "/teams//v1/models",
                 "/teams/fuzz/../red/context", "/teams/fuzz/%2e%2e/red/context",
                 "/teams/%ff/v1/models", "/v1/prefixes/%00", "/v1/prefixes/" + "a" * 3000,
                 "/teams/fuzz/v1/models?x=%ff", "/teams/fuzz//v1/models", "//v1/models",
                 "/v1/models/", "/teams/FUZZ/v1/models", "/teams/fuzz/v1/models/..",
                 "/teams/" + "%C3%A9" * 10 + "/v1/models", "/v1/chat/completions%20"]:
        yield Case(f"path {path[:60]}", "GET", path)


def keyless_team_cases() -> Iterator[Case]:
    """Without a valid key, any path under /teams/ is 401: known team or not."""
    teams = ["fuzz", "red", "no-such-team", "x", "FUZZ", "%ff", "", "a" * 200]
    tails = ["/v1/models", "/v1/chat/completions", "/context", "/runs", "/nothing", ""]
    for team in teams:
        for tail in tails:
            for method in ("GET", "POST"):
                for headers in ({}, {"Authorization": "Bearer gk-" + "0" * 43}):
                    yield Case(f"keyless {method} /teams/{team[:20]}{tail}", method,
                               f"/teams/{team}{tail}", b"{}",
                               {"Content-Type": JSON, "Authorization": "", **headers},
                               (401,))


# The tiny model's vocabulary: the embedding's and the logits' size.
VOCAB = int(json.loads((REPO / "deploy/models/tiny-llama/config.json").read_text())[
    "vocab_size"])
# Token ids at the vocabulary's edge, with the status each must get: the last id is
# served, the others refused before the engine (one of them reaching it killed it).
BOUNDARY = [(VOCAB - 1, 200), (VOCAB, 400), (-1, 400), (2**31, 400)]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}}}}}
FORCED = ("required", {"type": "function", "function": {"name": "f"}})


def token_id_fields(t: int) -> Iterator[tuple[str, str, dict[str, object]]]:
    """(label, kind, fields) of every request field that carries token ids to the engine;
    ``kind``: "completion" (the field is a completion's own) or "any"."""
    yield f"prompt [{t}]", "completion", {"prompt": [t]}
    yield f"prompt [[5], [{t}]]", "completion", {"prompt": [[5], [t]]}
    yield f"stop_token_ids [{t}] with min_tokens", "any", {"stop_token_ids": [t],
                                                            "min_tokens": 1}
    yield f"allowed_token_ids [{t}]", "any", {"allowed_token_ids": [t]}
    yield f"logit_bias {{{t}: 5}}", "any", {"logit_bias": {str(t): 5}}
    yield f"bad_words {t}", "any", {"bad_words": [str(t)]}


def token_id_cases() -> Iterator[Case]:
    """Token ids at the vocabulary's edge in every field that carries them, on /v1 and
    a team's routes, chats and completions; and /detokenize."""
    routes = [("/v1/completions", COMPLETION, "completion"),
              ("/teams/fuzz/v1/completions", COMPLETION, "completion"),
              ("/v1/chat/completions", CHAT, "chat"),
              ("/teams/fuzz/v1/chat/completions", CHAT, "chat")]
    for t, status in BOUNDARY:
        for path, valid, kind in routes:
            for label, field_kind, fields in token_id_fields(t):
                if field_kind != "any" and field_kind != kind:
                    continue
                body = {**valid, "max_tokens": 2, **fields}
                # bad_words are words, tokenized by vLLM: any text is served; a negative
                # prompt id is refused by vLLM's request schema (422)
                status_ = 200 if label.startswith("bad_words") else (
                    422 if t < 0 and label.startswith("prompt") else status)
                yield Case(f"token ids: {path} {label}", "POST", path,
                           json.dumps(body).encode(), {"Content-Type": JSON}, (status_,))
        yield Case(f"token ids: /detokenize [{t}]", "POST", "/detokenize",
                   json.dumps({"model": MODEL, "tokens": [t]}).encode(),
                   {"Content-Type": JSON}, (422 if t < 0 else status,))


def constraint_cases() -> Iterator[Case]:
    """Tool schemas and structured-output constraints the grammar backend refuses
    (a 400 before the engine, streamed or not), and forced tool choices it serves."""
    selfref = {"type": "function", "function": {"name": "f", "parameters": {"$ref": "#"}}}
    refused: list[tuple[str, dict[str, object]]] = []
    for choice in FORCED:
        refused.append((f"a tool whose parameters are {{$ref: #}}, tool_choice {choice}",
                        {"tools": [selfref], "tool_choice": choice}))
    refused += [("regex that does not parse", {"structured_outputs": {"regex": "a(b"}})]
    served = [(f"tool_choice {c}", {"tools": [TOOL], "tool_choice": c}) for c in FORCED]
    # xgrammar refused it after admission (vLLM escapes only quotes in a choice)
    served.append(("choice with a newline", {"structured_outputs": {"choice": ["a\nb", "c"]}}))
    for path in ("/v1/chat/completions", "/teams/fuzz/v1/chat/completions"):
        for stream in (False, True):
            for label, fields, status in [*((lb, f, 400) for lb, f in refused),
                                          *((lb, f, 200) for lb, f in served)]:
                body = {**CHAT, "max_tokens": 8, "stream": stream, **fields}
                yield Case(f"constraint: {path} {label}{' streamed' if stream else ''}",
                           "POST", path, json.dumps(body).encode(), {"Content-Type": JSON},
                           (status,))


def send(c: httpx.Client, case: Case) -> httpx.Response:
    url = c.base_url.copy_with(raw_path=case.path.encode())  # as written: no normalizing
    request = c.build_request(case.method, url, content=case.body, headers=case.headers)
    for name, value in case.headers.items():
        if value == "":
            del request.headers[name]
    return c.send(request)


def why_wrong(case: Case, r: httpx.Response) -> str | None:
    """Why the answer is not acceptable (None: it is)."""
    if r.status_code >= 500:
        return f"server error {r.status_code}: {r.text[:300]!r}"
    if case.expect and r.status_code not in case.expect:
        return f"status {r.status_code}, expected {case.expect}: {r.text[:300]!r}"
    if LEAKS.search(r.text):
        return f"an internal text in the answer: {r.text[:300]!r}"
    if r.status_code >= 400 and case.method != "HEAD":
        try:
            err = r.json()["error"]
        except (ValueError, KeyError, TypeError):
            return f"{r.status_code} without an OpenAI-shaped error: {r.text[:200]!r}"
        if err.get("code") != r.status_code or not err.get("message"):
            return f"a malformed error: {err}"
    return None


def test_raw_bodies_headers_methods_and_paths(base_url: str) -> None:
    replicas_before = live_replicas()
    cases = [*body_cases(), *header_cases(), *method_and_path_cases(),
             *keyless_team_cases(), *token_id_cases(), *constraint_cases()]
    statuses: Counter[str] = Counter()
    problems: list[str] = []
    with httpx.Client(base_url=base_url, headers=auth("fuzz"), timeout=120) as c:
        for case in cases:
            r = send(c, case)
            statuses[str(r.status_code)] += 1
            why = why_wrong(case, r)
            if why is not None:
                problems.append(f"{case.label}: {why}".replace(API_KEYS["fuzz"], "<key>"))
        c.delete("/v1/prefixes/raw-fuzz")
    still = engine_still_answers(base_url)
    server_errors = sum(n for s, n in statuses.items() if s.startswith("5"))
    record("fuzz_raw", cases=len(cases), statuses=dict(sorted(statuses.items())),
           server_errors=server_errors, findings=len(problems),
           body_cases=sum(1 for _ in body_cases()), header_cases=sum(1 for _ in header_cases()),
           method_and_path_cases=sum(1 for _ in method_and_path_cases()),
           keyless_team_cases=sum(1 for _ in keyless_team_cases()),
           token_id_cases=sum(1 for _ in token_id_cases()),
           constraint_cases=sum(1 for _ in constraint_cases()), afterwards=still,
           replicas_unchanged=live_replicas() == replicas_before)
    assert not problems, f"{len(problems)} of {len(cases)}:\n" + "\n".join(problems[:60])
    assert live_replicas() == replicas_before, "a replica died or restarted"


def test_models_name_the_model_not_a_server_path(base_url: str) -> None:
    with httpx.Client(base_url=base_url, headers=auth("fuzz"), timeout=60) as c:
        for path in ("/v1/models", "/teams/fuzz/v1/models"):
            r = c.get(path)
            card = r.json()["data"][0]
            assert r.status_code == 200 and card["root"] == card["id"] == MODEL, r.text
            assert not LEAKS.search(r.text), r.text


def stream_problem(r: httpx.Response) -> str | None:
    """Why a 200 event stream is not a whole answer: each one ends with a finish or an
    error event, then [DONE]."""
    if not r.headers.get("content-type", "").startswith("text/event-stream"):
        return None
    events = [x for x in r.text.split("\n\n") if x.startswith("data: ")]
    if not events or events[-1] != "data: [DONE]":
        return f"a stream without [DONE]: {r.text[-200:]!r}"
    if '"finish_reason":"' not in r.text.replace(" ", "") and '{"error":' not in r.text:
        return f"a stream with neither a finish nor an error: {r.text[-300:]!r}"
    return None


def test_token_id_boundaries_and_constraints(base_url: str) -> None:
    """Every field that carries token ids, at the vocabulary's edge, and constraints the
    grammar backend refuses, on /v1 and a team's routes: the statuses above, each
    stream whole, and afterwards every replica alive and answering (one out-of-range id
    used to kill an engine for every team)."""
    replicas_before = live_replicas()
    cases = [*token_id_cases(), *constraint_cases()]
    problems: list[str] = []
    statuses: Counter[str] = Counter()
    with httpx.Client(base_url=base_url, headers=auth("fuzz"), timeout=120) as c:
        for case in cases:
            r = send(c, case)
            statuses[str(r.status_code)] += 1
            why = why_wrong(case, r) or stream_problem(r)
            if why is not None:
                problems.append(f"{case.label}: {why}")
        for _ in range(4):  # Serve spreads these over both replicas
            r = c.post("/v1/completions", json={**COMPLETION, "max_tokens": 2})
            assert r.status_code == 200, r.text
    still = engine_still_answers(base_url)
    record("token_ids", cases=len(cases), statuses=dict(sorted(statuses.items())),
           findings=len(problems), afterwards=still,
           replicas_unchanged=live_replicas() == replicas_before)
    assert not problems, f"{len(problems)} of {len(cases)}:\n" + "\n".join(problems)
    assert live_replicas() == replicas_before, "a replica died or restarted"


def proxy_process(port: int) -> psutil.Process:
    """The process of Serve's HTTP proxy: the one listening on the app's port."""
    (pid,) = {c.pid for c in psutil.net_connections("tcp")
              if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid}
    return psutil.Process(pid)


class TestBigHeaders:
    """Header sections over the front's limits (``header_limits.py``), sent without a key:
    Serve's proxy answers 431 while the header is still arriving, its memory stays flat
    and a keyed client is answered meanwhile; and each answer has one request id, in its
    header and its body, whatever the client sent as its own."""

    def test_a_100_mb_header_is_refused_before_any_key_is_read(self, base_url: str) -> None:
        port = int(base_url.rsplit(":", 1)[1])
        proxy = proxy_process(port)
        rss_before = proxy.memory_info().rss / MB
        flooded: list[Flood] = []
        latencies: list[float] = []
        done = threading.Event()

        def keyed() -> None:
            with httpx.Client(base_url=base_url, headers=auth("fuzz"), timeout=60) as c:
                while not done.is_set() or len(latencies) < 3:
                    t0 = time.monotonic()
                    assert c.get("/v1/models").status_code == 200
                    latencies.append(time.monotonic() - t0)

        other = threading.Thread(target=keyed)
        other.start()
        try:
            flooded.append(flood(port, 100, keep_sending=True))  # as a hostile client
            many = b"".join(b"x-%d: v\r\n" % i for i in range(2000))
            fields = refused(raw_request(port, GET + many), "GRANIKV_MAX_HEADERS")
        finally:
            done.set()
            other.join()
        rss_after = proxy.memory_info().rss / MB
        (f,) = flooded
        error = refused(f.answer, "GRANIKV_MAX_HEADER_BYTES")
        record("big_headers", header_mb=100, sent_mb_before_answer=round(f.sent_mb, 1),
               refused_after_s=round(f.answered_s, 3), status=error["code"],
               sent_mb_in_all=round(f.total_mb, 1), sending_s=round(f.total_s, 3),
               fields_2000_status=fields["code"], proxy_rss_before_mb=round(rss_before, 1),
               proxy_rss_after_mb=round(rss_after, 1),
               keyed_models_max_s=round(max(latencies), 3),
               keyed_models_requests=len(latencies))
        assert f.answered_s < 2.0 and f.sent_mb < 100, f
        assert rss_after - rss_before < 16, (rss_before, rss_after)
        assert max(latencies) < 2.0, latencies

    def test_one_request_id_in_header_and_body(self, base_url: str) -> None:
        port = int(base_url.rsplit(":", 1)[1])
        answer = raw_request(port, GET + b"x-request-id: " + b"r" * MB + b"\r\n")
        error = refused(answer, "GRANIKV_MAX_HEADER_BYTES")  # one id in both places
        assert len(str(error["request_id"])) == 32 and len(answer) < 2000
        rid = b"x-request-id"
        odd = [[(rid, b"a b")], [(rid, b"<script>")], [(rid, b"a" * 129)], [(rid, b"r\xe9q")],
               [(rid, b"")], [(rid, b"one"), (rid, b"two")]]
        with httpx.Client(base_url=base_url, timeout=60) as c:
            for given in odd:
                for key in ({}, auth("fuzz")):  # the app's 401, and its 404
                    keyed = [(k.encode(), v.encode()) for k, v in key.items()]
                    r = c.get("/v1/no-such-route", headers=[*given, *keyed])
                    assert r.status_code in (401, 404), r.text
                    ids = r.headers.get_list("x-request-id")
                    assert ids == [r.json()["error"]["request_id"]], (given, ids, r.text)
                    assert len(ids[0]) == 32 and ids[0] not in str(given), (given, ids)
            r = c.get("/v1/no-such-route", headers={**auth("fuzz"), "x-request-id": "ok-1.2:3"})
            assert r.headers.get_list("x-request-id") == ["ok-1.2:3"]
            assert r.json()["error"]["request_id"] == "ok-1.2:3"
