"""Request fields whose cost is paid for every generated token, in the output path or
the engine core that every team's requests share (``limits.per_token_work``).

A request with 100,000 ``stop`` strings once slowed another team's 2-token chat from
0.14 s to 64 s: the output processor searched every string after every token. Each such
field is bounded (``stop`` count and characters, ``stop_token_ids``, ``bad_words`` count
and characters, ``logit_bias``, ``repetition_detection.max_pattern_size``):

- the bounds themselves, fuzzed against a reference predicate (no cluster);
- on the session app, every field one over its default limit is a 400 naming the limit,
  on /v1 and the team route, streamed and not, and at the limit it is served;
- the worst delay one team at the limits causes another team's small chat, measured
  (``per_token_work`` in the figures file).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from granikv_platform.config import LimitsConfig
from granikv_platform.limits import LimitExceeded, generation_body, per_token_work
from tests.conftest import LIMITS, auth
from tests.reliability.figures import record

MODEL = "tiny-llama"
DEFAULTS = LimitsConfig()


def over(body: dict[str, Any], lim: LimitsConfig) -> set[str]:
    """The limits ``body`` exceeds, computed from the fields directly (the reference)."""
    out = set()
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else None
    if stops is not None:
        if len(stops) > lim.max_stop:
            out.add("max_stop")
        if sum(len(s) for s in stops if isinstance(s, str)) > lim.max_stop_chars:
            out.add("max_stop_chars")
    if isinstance(body.get("bad_words"), list):
        if len(body["bad_words"]) > lim.max_bad_words:
            out.add("max_bad_words")
        if sum(len(s) for s in body["bad_words"]) > lim.max_bad_words_chars:
            out.add("max_bad_words_chars")
    if len(body.get("stop_token_ids") or []) > lim.max_stop_token_ids:
        out.add("max_stop_token_ids")
    if len(body.get("logit_bias") or {}) > lim.max_logit_bias:
        out.add("max_logit_bias")
    size = (body.get("repetition_detection") or {}).get("max_pattern_size", 0)
    if size > lim.max_repetition_pattern:
        out.add("max_repetition_pattern")
    return out


words = st.text(alphabet="abc <>\n", max_size=12)
bodies = st.fixed_dictionaries({}, optional={
    "stop": st.one_of(words, st.lists(words, max_size=24)),
    "bad_words": st.lists(words, max_size=24),
    "stop_token_ids": st.lists(st.integers(0, 99), max_size=24),
    "logit_bias": st.dictionaries(st.integers(0, 99).map(str), st.floats(-100, 100),
                                  max_size=24),
    "repetition_detection": st.fixed_dictionaries({
        "max_pattern_size": st.integers(0, 30), "min_count": st.integers(2, 4)}),
})
small = st.builds(LimitsConfig, max_stop=st.integers(0, 20),
                  max_stop_chars=st.integers(0, 120), max_bad_words=st.integers(0, 20),
                  max_bad_words_chars=st.integers(0, 120),
                  max_stop_token_ids=st.integers(0, 20), max_logit_bias=st.integers(0, 20),
                  max_repetition_pattern=st.integers(0, 20))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(body=bodies, lim=small)
def test_a_body_is_refused_exactly_when_a_field_is_over_its_limit(
        body: dict[str, Any], lim: LimitsConfig) -> None:
    expected = over(body, lim)
    try:
        per_token_work(body, lim)
    except LimitExceeded as e:
        named = {n for n in expected if f"limits.{n})" in str(e)}
        assert named, (str(e), expected)
    else:
        assert not expected, body


def test_ill_typed_fields_are_left_to_vllms_validation() -> None:
    for body in ({"stop": 7}, {"bad_words": "x" * 10**5}, {"logit_bias": 3},
                 {"repetition_detection": {"max_pattern_size": "big"}},
                 {"stop": [None] * 3}):
        assert generation_body(body, DEFAULTS) is body


# One over each default limit (the session app keeps the defaults of these fields).
OVER = {
    "max_stop": {"stop": [f"s{i}" for i in range(DEFAULTS.max_stop + 1)]},
    "max_stop_chars": {"stop": ["x" * (DEFAULTS.max_stop_chars + 1)]},
    "max_bad_words": {"bad_words": [f"w{i}" for i in range(DEFAULTS.max_bad_words + 1)]},
    "max_bad_words_chars": {"bad_words": ["y" * (DEFAULTS.max_bad_words_chars + 1)]},
    "max_stop_token_ids": {"stop_token_ids": [3] * (DEFAULTS.max_stop_token_ids + 1)},
    "max_logit_bias": {"logit_bias": {str(i): 1 for i in range(DEFAULTS.max_logit_bias + 1)}},
    "max_repetition_pattern": {"repetition_detection": {
        "max_pattern_size": DEFAULTS.max_repetition_pattern + 1, "min_count": 2}},
}
# Every field at its limit at once: what one request may make the shared path do.
AT_LIMITS = {
    "stop": ["#" * (DEFAULTS.max_stop_chars // DEFAULTS.max_stop - 1) + chr(0x2460 + i)
             for i in range(DEFAULTS.max_stop)],
    "bad_words": ["zq" * (DEFAULTS.max_bad_words_chars // DEFAULTS.max_bad_words // 2 - 1)
                  + chr(0x2460 + i) for i in range(DEFAULTS.max_bad_words)],
    "stop_token_ids": [1] * DEFAULTS.max_stop_token_ids,
    "logit_bias": {str(i + 10): 0.5 for i in range(DEFAULTS.max_logit_bias)},
    "repetition_detection": {"max_pattern_size": DEFAULTS.max_repetition_pattern,
                             "min_count": 64},
    "ignore_eos": True,
}


@pytest.mark.ray
@pytest.mark.vllm
def test_each_field_over_its_limit_is_a_400_that_names_it(base_url: str) -> None:
    routes = (("/v1/chat/completions", "messages"), ("/v1/completions", "prompt"),
              ("/teams/plain/v1/chat/completions", "messages"))
    with httpx.Client(base_url=base_url, headers=auth("plain"), timeout=120) as c:
        for name, fields in OVER.items():
            for path, kind in routes:
                for stream in (False, True):
                    r = c.post(path, json={**request(kind, 2), **fields, "stream": stream})
                    assert r.status_code == 400, (name, path, r.text)
                    err = r.json()["error"]
                    assert f"limits.{name})" in err["message"] and err["request_id"], r.text
        for path, kind in routes:
            r = c.post(path, json={**request(kind, 4), **AT_LIMITS})
            assert r.status_code == 200, (path, r.text)
            assert r.json()["usage"]["completion_tokens"] == 4, r.text


def request(kind: str, max_tokens: int) -> dict[str, Any]:
    if kind == "messages":
        return {"model": MODEL, "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": "count to ten"}]}
    return {"model": MODEL, "max_tokens": max_tokens, "prompt": "count to ten"}


def small_chat_latencies(base_url: str, count: int) -> list[float]:
    out = []
    with httpx.Client(base_url=base_url, headers=auth("plain"), timeout=120) as c:
        for _ in range(count):
            t = time.perf_counter()
            r = c.post("/teams/plain/v1/chat/completions", json=request("messages", 2))
            assert r.status_code == 200, r.text
            out.append(time.perf_counter() - t)
    return out


@pytest.mark.ray
@pytest.mark.vllm
def test_the_delay_one_team_at_the_limits_causes_another(base_url: str) -> None:
    """Four streams of team ``bench`` with every per-token field at its limit, ``n`` and
    ``max_tokens`` at theirs, while team ``plain`` sends 2-token chats."""
    quiet = small_chat_latencies(base_url, 10)
    stop = threading.Event()
    served = [0]

    def heavy() -> None:
        with httpx.Client(base_url=base_url, headers=auth("bench"), timeout=300) as c:
            while not stop.is_set():
                body = {**request("messages", LIMITS["max_tokens"]), **AT_LIMITS,
                        "n": LIMITS["max_choices"], "stream": True}
                with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    assert r.status_code == 200
                    for _ in r.iter_lines():
                        pass
                served[0] += 1

    threads = [threading.Thread(target=heavy, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the four are in the engine
    try:
        loaded = small_chat_latencies(base_url, 20)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=300)
    assert served[0] >= 4, served
    record("per_token_work", quiet_p50_s=round(statistics.median(quiet), 3),
           quiet_max_s=round(max(quiet), 3),
           loaded_p50_s=round(statistics.median(loaded), 3),
           loaded_max_s=round(max(loaded), 3), heavy_streams_served=served[0],
           limits={k: v for k, v in DEFAULTS.model_dump().items()
                   if k.startswith(("max_stop", "max_bad", "max_logit", "max_rep"))})
    # Before the bounds, four such streams (100,000 stop strings each) held another
    # team's 2-token chat for 64 s; at the limits it is served in seconds.
    assert max(loaded) < 10.0, loaded
