"""Cross-team ids on the real Serve app (tests/conftest.py's session app and its keys):
every configured team tries every other team's ids on every prefix, context and run
route.

Prefix ids are scoped by team, and so are run ids and spec files. For an id of another
team, a team gets exactly what it gets for an id that nobody has: 404 with the same
message (GET, DELETE, binding a request, the run routes, a spec file's name). It may
register the same id, and gets a prefix of its own under it; while every other team
holds such a prefix under each of a victim's ids (its prefix and its context), the
victim's prefix, context and run are unchanged, and it still sets its context and runs
its team. Another team's /teams/{team} routes stay 403 whatever the id (the route, not
the id, is refused).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from granikv_agents import load_spec
from granikv_agents.spec_file import spec_names
from tests.agents.helpers import wait_run
from tests.conftest import REPO, TEAMS, auth
from tests.reliability.figures import record

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
MODEL = "tiny-llama"
SPECS = REPO / "deploy" / "teams"
NO_CONTEXT = "plain"  # a team that never sets a context (tests/conftest.py)
FIGURES: dict[str, Any] = {}


@dataclass
class Victim:
    team: str
    prefix: dict[str, Any]  # its prefix's view
    tokens: list[int]
    context: dict[str, Any] | None  # its context's view
    run: dict[str, Any] | None  # a finished run's view
    made_context: bool  # set here (deleted afterwards)


def small_run(team: str, context: str) -> dict[str, Any]:
    """review.yaml cut to one reviewer and the synthesizer, as ``team``, over ``context``
    (the team's current one, so that the run reuses it)."""
    spec = load_spec(SPECS / "review.yaml")
    return spec.model_copy(update={
        "team": team, "context": context, "agents": [spec.agents[0], spec.agents[-1]],
        "sampling": spec.sampling.model_copy(update={"max_tokens": 4})}).model_dump(mode="json")


def client(base_url: str, team: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers=auth(team), timeout=120)


def own_state(c: httpx.Client, v: Victim) -> dict[str, Any]:
    """What must not change: the prefix, the context, the run, as the team reads them."""
    keys = ("prefix_id", "team", "kind", "length", "pinned", "content_hash")
    prefix = c.get(f"/v1/prefixes/{v.prefix['prefix_id']}").json()
    out: dict[str, Any] = {"prefix": {k: prefix[k] for k in keys}}
    if v.context is not None:
        ctx = c.get(f"/teams/{v.team}/context").json()
        out["context"] = {k: ctx[k] for k in (*keys, "text")}
    if v.run is not None:
        run = c.get(f"/teams/{v.team}/runs/{v.run['run_id']}").json()
        out["run"] = {k: run[k] for k in ("status", "attempts", "updated_at", "error")}
    return out


@pytest.fixture(scope="module")
def victims(base_url: str) -> Iterator[dict[str, Victim]]:
    """Per configured team: a pinned prefix, its context (set here when it had none,
    but for the team that never has one) and a finished run."""
    out: dict[str, Victim] = {}
    for i, team in enumerate(TEAMS):
        with client(base_url, team) as c:
            tokens = [7, 300 + i, 301 + i, 302 + i]
            r = c.post("/v1/prefixes", json={"token_ids": tokens, "prefix_id": f"{team}-xt"})
            assert r.status_code in (200, 201), r.text
            got = c.get(f"/teams/{team}/context")
            made = got.status_code == 404 and team != NO_CONTEXT
            if made:
                got = c.put(f"/teams/{team}/context", json={
                    "text": f"Notes of team {team}: keep answers short."})
            context = got.json() if got.status_code == 200 else None
            run = None
            if context is not None:
                start = c.post(f"/teams/{team}/runs", json={
                    "spec": small_run(team, context["text"])})
                assert start.status_code == 201, start.text
                run = wait_run(c, team, start.json()["run_id"])
                assert run["status"] == "succeeded", run
            out[team] = Victim(team, r.json(), tokens, context, run, made)
    yield out
    for v in out.values():
        with client(base_url, v.team) as c:
            c.delete(f"/v1/prefixes/{v.prefix['prefix_id']}")
            if v.made_context and v.context is not None:
                c.delete(f"/v1/prefixes/{v.context['prefix_id']}")


def message(r: httpx.Response) -> str:
    return str(r.json()["error"]["message"])


def test_no_team_can_take_or_learn_another_teams_ids(
        base_url: str, victims: dict[str, Victim]) -> None:
    spec_team = {name: load_spec(SPECS / f"{name}.yaml").team for name in spec_names(SPECS)}
    before = {t: own_state(client(base_url, t), v) for t, v in victims.items()}
    seen: Counter[str] = Counter()
    taken: list[tuple[str, str]] = []  # (team, id): prefixes registered under others' ids
    try:
        for attacker in TEAMS:
            with client(base_url, attacker) as c:
                for victim, v in victims.items():
                    if victim == attacker:
                        continue
                    seen.update(attack(c, attacker, v, spec_team))
                    for pid in ids_of(v):  # the same id, taken: the attacker's own prefix
                        r = c.post("/v1/prefixes", json={
                            "token_ids": [9, 9, TEAMS.index(attacker) + 1], "prefix_id": pid,
                            "pin": False})
                        assert r.status_code == 201, (attacker, pid, r.text)
                        assert (r.json()["prefix_id"], r.json()["team"]) == (pid, attacker)
                        taken.append((attacker, pid))
                        seen["own_prefix_under_their_id_201"] += 1
                mine = c.get("/v1/prefixes").json()["data"]
                assert {p["team"] for p in mine} == {attacker}
        # Every victim's ids are now also every other team's: the victim is unchanged,
        # and still works.
        for team, v in victims.items():
            with client(base_url, team) as c:
                assert own_state(c, v) == before[team], team
                got = c.get(f"/v1/prefixes/{v.prefix['prefix_id']}").json()
                assert got["state"] == "ready" and got["pinned"], got
                if v.context is not None:
                    again = c.put(f"/teams/{team}/context", json={"text": v.context["text"]})
                    assert again.status_code == 200, (team, again.text)
                    assert again.json()["prefix_id"] == v.context["prefix_id"]
                    chat = c.post(f"/teams/{team}/v1/chat/completions", json={
                        "model": MODEL, "max_tokens": 2,
                        "messages": [{"role": "user", "content": "hi"}]})
                    assert chat.status_code == 200, (team, chat.text)
                    seen["victim_still_works"] += 1
        with client(base_url, "blue") as c:  # the configured context's team, its own spec
            r = c.post("/teams/blue/runs", json={"spec_name": "plan"})
            assert r.status_code == 201, r.text
            assert wait_run(c, "blue", r.json()["run_id"])["status"] == "succeeded"
    finally:
        for team, pid in taken:
            with client(base_url, team) as c:
                c.delete(f"/v1/prefixes/{pid}")
    FIGURES.update(teams=len(TEAMS), pairs=len(TEAMS) * (len(TEAMS) - 1), **seen)
    record("cross_team_ids", **FIGURES)


def ids_of(v: Victim) -> list[str]:
    return [v.prefix["prefix_id"], *([v.context["prefix_id"]] if v.context else [])]


def attack(c: httpx.Client, attacker: str, v: Victim,
           spec_team: dict[str, str]) -> Counter[str]:
    """Every route an id of ``v``'s can be named on, by ``attacker``: each answer must
    be the one an id that nobody has gets."""
    seen: Counter[str] = Counter()

    def same_as_absent(method: str, path: str, real: str, absent: str,
                       body: dict[str, Any] | None = None) -> None:
        theirs = c.request(method, path.format(id=real), json=body)
        nobody = c.request(method, path.format(id=absent), json=body and {
            **body, "vllm_xargs": {"granikv_prefix_id": absent}})
        assert theirs.status_code == nobody.status_code == 404, (
            attacker, method, path, real, theirs.text, nobody.text)
        assert message(theirs).replace(real, "ID") == message(nobody).replace(absent, "ID")
        seen["as_absent_404"] += 1

    for pid in ids_of(v):
        for method in ("GET", "DELETE"):
            same_as_absent(method, "/v1/prefixes/{id}", pid, "nobodys-id")
        for route in ("/v1/completions", f"/teams/{attacker}/v1/completions"):
            same_as_absent("POST", route, pid, "nobodys-id", {
                "model": MODEL, "max_tokens": 1, "prompt": [*v.tokens, 5],
                "vllm_xargs": {"granikv_prefix_id": pid}})
    if v.run is not None:
        rid = v.run["run_id"]
        for method, path in (("GET", "/runs/{id}"), ("GET", "/runs/{id}/events"),
                             ("POST", "/runs/{id}/resume")):
            same_as_absent(method, f"/teams/{attacker}{path}", rid, "run-0000000000000000")
    for name, owner in spec_team.items():
        if owner == v.team:
            r = c.post(f"/teams/{attacker}/runs", json={"spec_name": name})
            assert r.status_code == 404 and message(r) == f"no team spec {name!r}", r.text
            seen["spec_file_as_absent_404"] += 1
    for method, path, body in (("GET", "/context", None),
                               ("PUT", "/context", {"text": "taken"}),
                               ("GET", f"/runs/{v.run['run_id'] if v.run else 'run-x'}", None)):
        r = c.request(method, f"/teams/{v.team}{path}", json=body)
        assert r.status_code == 403, (attacker, method, path, r.text)  # the route's team
        seen["their_route_403"] += 1
    return seen
