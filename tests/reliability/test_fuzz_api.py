"""schemathesis against the platform's own OpenAPI document, on loopback, as team
``fuzz`` (its API key): positive cases (bodies and parameters that fit the schema,
vLLM's chat / completion request schemas included) and negative ones (that do not).

Checked for every case: no 5xx, and an answer of the platform's shape (an OpenAI-shaped
error for a 4xx; JSON or a finished event stream for a 2xx). Afterwards the app has not
crashed (the same LLM replicas are alive) and the engine still answers.
Other teams' routes are fuzzed briefly (they must all be 403 for this key).

Two bounds keep the run short, both written here: runs the fuzzer starts (POST
/teams/fuzz/runs) are cut to at most 3 agents, 2 rounds and 4 tokens a turn, and a chat
or completion that names no ``max_tokens`` (a response no ``max_output_tokens``) is
given the app's limit (conftest.LIMITS: 64 tokens; a request may not ask for more),
since without one vLLM generates up to
``max_model_len`` (as ``vllm serve`` does: tests/platform/test_openai_surface.py).
What the fuzzer made (runs, prefixes, the fuzz team's context) is waited for and removed
at the end, so the next tests find the pools as before. Cases are derandomized (the same
each run) unless GRANIKV_FUZZ_SEED is set; GRANIKV_FUZZ_EXAMPLES scales the count.

schemathesis's client stops reading an event stream after 20 events by default (and
closes it, so the app cancels the request); here it reads up to ``MAX_STREAM_EVENTS``,
more than the app's limits let one stream carry, so every stream is read to its end, and
one that is still going at that point is itself a finding.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.conftest import ADMIN, API_KEYS, APP, LIMITS, auth, stats, wait_until
from tests.reliability.figures import record

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
EXAMPLES = int(os.environ.get("GRANIKV_FUZZ_EXAMPLES", "25"))
SEED = os.environ.get("GRANIKV_FUZZ_SEED")
OTHER_TEAM_EXAMPLES = 3
RUN_BOUNDS = {"agents": 3, "rounds": 2, "max_tokens": 4}
# the longest stream the app may send: every choice's role, tokens and finish, then the
# usage and [DONE]; a run's event stream is far shorter under RUN_BOUNDS
MAX_STREAM_EVENTS = 4 * (LIMITS["max_choices"] * (LIMITS["max_tokens"] + 2) + 2)


# How a finished event stream ends: a chat's or completion's, a run's, a response's
# (its last event, or its error event).
STREAM_ENDS = ("data: [DONE]", "event: end", "event: response.completed",
               "event: response.incomplete", "event: response.failed", "event: error")


def bound_run_spec(body: Any) -> None:
    """POST /teams/fuzz/runs: keep a fuzzed spec small enough to finish in seconds."""
    spec = body.get("spec") if isinstance(body, dict) else None
    if not isinstance(spec, dict):
        return
    spec["team"] = "fuzz"  # otherwise nearly every spec is refused (403) before it runs
    if isinstance(spec.get("agents"), list):
        spec["agents"] = spec["agents"][:RUN_BOUNDS["agents"]]
        for a in spec["agents"]:
            if isinstance(a, dict) and isinstance(a.get("sampling"), dict):
                a["sampling"]["max_tokens"] = RUN_BOUNDS["max_tokens"]
    if isinstance(spec.get("sampling"), dict):
        spec["sampling"]["max_tokens"] = RUN_BOUNDS["max_tokens"]
    limits = spec.get("limits")
    if isinstance(limits, dict):
        limits["rounds"] = min(limits["rounds"], 2) if isinstance(limits.get("rounds"),
                                                                   int) else 1
        limits["max_tokens"] = RUN_BOUNDS["max_tokens"]


def bound_generation(body: Any, field: str = "max_tokens") -> None:
    """A chat or completion body without ``max_tokens`` (a response's without
    ``max_output_tokens``, its ``field``): the app's limit (64 tokens)."""
    named = {"max_tokens", "max_completion_tokens", "max_output_tokens"}
    if isinstance(body, dict) and not named & set(body):
        body[field] = LIMITS["max_tokens"]


def header(response: Any, name: str) -> str:
    """A header of schemathesis's response (its values are lists)."""
    for key, value in response.headers.items():
        if key.lower() == name:
            return str(value[0] if isinstance(value, list) and value else value)
    return ""


def well_formed(response: Any) -> str | None:
    """Why the answer is not of the platform's shape (None: it is)."""
    status = response.status_code
    if status >= 500:
        return f"server error {status}: {response.text[:400]!r}"
    ctype = header(response, "content-type")
    text = response.text
    if status >= 400:
        try:
            err = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            return f"{status} without an OpenAI-shaped error: {text[:200]!r}"
        if err.get("code") != status or not err.get("message"):
            return f"{status} with a malformed error: {err}"
        return None
    if ctype.startswith("text/event-stream"):
        if response.stream_cut_short:
            return (f"an event stream still going after {MAX_STREAM_EVENTS} events or the "
                    f"client's timeout: {text[-200:]!r}")
        if not any(end in text for end in STREAM_ENDS):
            return f"an event stream that did not finish: {text[-200:]!r}"
        if '"error"' in text and '"code": 5' in text:
            return f"an event stream that ended in a server error: {text[-300:]!r}"
        return None
    if ctype.startswith("application/json"):
        try:
            json.loads(text)
        except ValueError:
            return f"invalid JSON: {text[:200]!r}"
    return None


def fuzz_case(op: Any, mode: Any, examples: int, label: str, team: str | None,
              base_url: str, headers: dict[str, str], statuses: Counter[str]) -> Any:
    """A hypothesis test over ``op``'s cases in ``mode`` (positive or negative)."""

    @settings(max_examples=examples, deadline=None, database=None,
              derandomize=SEED is None, phases=[Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        if case.path.endswith("/runs") and case.method.upper() == "POST":
            bound_run_spec(case.body)
        if case.path.endswith("completions") and case.method.upper() == "POST":
            bound_generation(case.body)
        if case.path.endswith("/v1/responses") and case.method.upper() == "POST":
            bound_generation(case.body, "max_output_tokens")
        response = case.call(base_url=base_url, headers=headers, timeout=120)
        statuses[str(response.status_code)] += 1
        why = well_formed(response)
        assert why is None, f"{label}: {why}\n{case.as_curl_command()}"
        if team not in (None, "fuzz"):  # another team's route: always refused (401 when
            # a negative case replaced the credentials, 404 for an unknown run)
            assert response.status_code in (401, 403, 404), (label, response.text)

    return run


def fuzzed_schema(base_url: str) -> Any:
    import schemathesis
    from schemathesis.config import SchemathesisConfig

    config = SchemathesisConfig()
    config.projects.default.max_stream_events = MAX_STREAM_EVENTS
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json", config=config,
                                         timeout=30, headers=ADMIN)  # the operator's


def test_the_fuzzer_reads_the_longest_stream_to_its_end(base_url: str) -> None:
    """The fuzzer's client, as configured here, reads a stream of the most tokens the
    app allows to its end (schemathesis's default would close it after 20 events)."""
    op = fuzzed_schema(base_url)["/teams/fuzz/v1/chat/completions"]["POST"]
    body = {"model": "tiny-llama", "stream": True, "ignore_eos": True,
            "n": LIMITS["max_choices"], "max_tokens": LIMITS["max_tokens"],
            "messages": [{"role": "user", "content": "a long answer"}]}
    response = op.Case(body=body).call(base_url=base_url, headers=auth("fuzz"), timeout=120)
    assert response.status_code == 200, response.text
    assert well_formed(response) is None, well_formed(response)
    events = [x for x in response.text.split("\n\n") if x.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert len(events) > 20 + LIMITS["max_tokens"], len(events)


def live_replicas() -> set[str]:
    import ray

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{APP}#")}


def test_fuzz_the_openapi_document(base_url: str) -> None:
    from schemathesis.generation.modes import GenerationMode

    schema = fuzzed_schema(base_url)
    replicas_before = live_replicas()
    headers = auth("fuzz")
    statuses: Counter[str] = Counter()
    problems: list[str] = []
    t0 = time.monotonic()
    operations = 0
    for result in schema.get_all_operations():
        op = result.ok()
        path = op.path
        if path in ("/healthz", "/readyz") or path.startswith("/docs") or path == "/openapi.json":
            continue
        team = path.split("/")[2] if path.startswith("/teams/") else None
        examples = EXAMPLES if team in (None, "fuzz") else OTHER_TEAM_EXAMPLES
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            label = f"{op.method.upper()} {path} [{mode.value}]"

            run = fuzz_case(op, mode, examples, label, team, base_url, headers, statuses)
            if SEED is not None:
                run = seed(int(SEED))(run)  # type: ignore[assignment]
            try:
                run()
            except AssertionError as e:  # collect every operation's findings
                problems.append(str(e).replace(API_KEYS["fuzz"], "<fuzz key>")[:2000])
    elapsed = time.monotonic() - t0
    cleaned = clean_up(base_url)
    still = engine_still_answers(base_url)
    record("fuzz", operations=operations, cases=sum(statuses.values()),
           statuses=dict(sorted(statuses.items())), server_errors=sum(
               n for s, n in statuses.items() if s.startswith("5")),
           findings=len(problems), examples_per_operation_and_mode=EXAMPLES,
           other_teams_examples=OTHER_TEAM_EXAMPLES, seed=SEED or "derandomized",
           seconds=round(elapsed, 1), cleaned_up=cleaned, afterwards=still,
           replicas_unchanged=live_replicas() == replicas_before)
    assert not problems, "\n\n".join(problems)
    assert live_replicas() == replicas_before, "a replica died or restarted"
    assert sum(statuses.values()) >= operations * 2, statuses


def clean_up(base_url: str) -> dict[str, int]:
    """Wait for the runs the fuzzer started, then delete the prefixes it registered."""
    with httpx.Client(base_url=base_url, headers=auth("fuzz"), timeout=60) as c:
        def runs_done() -> list[dict[str, Any]] | None:
            runs = c.get("/teams/fuzz/runs").json()["data"]
            return None if any(r["status"] == "running" for r in runs) else runs or [{}]

        runs = wait_until(runs_done, 300, "the fuzzer's runs to stop", every_s=1.0)
        prefixes = c.get("/v1/prefixes").json()["data"]
        for p in prefixes:
            r = c.delete(f"/v1/prefixes/{p['prefix_id']}")
            assert r.status_code in (200, 404), r.text
        assert c.get("/v1/prefixes").json()["data"] == []
    return {"runs": len([r for r in runs if r]), "prefixes_deleted": len(prefixes)}


def engine_still_answers(base_url: str) -> dict[str, Any]:
    with httpx.Client(base_url=base_url, headers=auth("red"), timeout=120) as c:
        body = {"model": "tiny-llama", "max_tokens": 4, "ignore_eos": True,
                "messages": [{"role": "user", "content": "still there?"}]}
        r = c.post("/teams/red/v1/chat/completions", json=body)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text
        with c.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as s:
            lines = [x for x in s.iter_lines() if x.startswith("data: ")]
        assert s.status_code == 200 and lines[-1] == "data: [DONE]", lines[-3:]
    reps = stats(base_url)["replicas"]
    assert len(reps) == 2
    return {"chat": r.status_code, "stream_chunks": len(lines), "replicas": len(reps)}
