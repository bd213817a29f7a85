"""Two teams running at once never see each other's prefix: each team's agent requests
hit only its own HOT prefix (per-prefix hits from the engine), no bind error, and a team
can neither read, stream, resume nor start the other's runs."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.agents.helpers import delta, fresh_review, settled, wait_run

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]


def test_two_teams_at_once_hit_only_their_own_prefix(client: Client, base_url: str) -> None:
    red, gold = client("red"), client("gold")
    before = settled(base_url)
    runs = {"red": red.post("/teams/red/runs", json={"spec": fresh_review()}),
            "gold": gold.post("/teams/gold/runs", json={"spec_name": "debate"})}
    assert [r.status_code for r in runs.values()] == [201, 201], [r.text for r in runs.values()]
    ids = {team: r.json()["run_id"] for team, r in runs.items()}
    with ThreadPoolExecutor(2) as pool:  # both run at once in the service
        views = dict(zip(ids, pool.map(lambda t: wait_run(client(t), t, ids[t]), ids)))
    assert {t: v["status"] for t, v in views.items()} == {"red": "succeeded",
                                                         "gold": "succeeded"}
    assert views["red"]["updated_at"] > views["gold"]["created_at"]  # they overlapped
    assert views["gold"]["updated_at"] > views["red"]["created_at"]
    prefix = {t: v["context"]["prefix_id"] for t, v in views.items()}
    assert prefix["red"].startswith("red-") and prefix["gold"].startswith("gold-")

    d = delta(settled(base_url), before)
    calls = {t: len(v["turns"]) for t, v in views.items()}
    assert calls == {"red": 9, "gold": 3 * 2 + 1}
    hit = {k: v for k, v in d.items() if k.startswith("prefix:")}
    assert hit == {f"prefix:{prefix['red']}": 9, f"prefix:{prefix['gold']}": 7}, d
    assert d["hits"] == 16 and "bind_errors" not in d and "cold_fallbacks" not in d, d

    # The prefix and the runs stay with their team: to another, their ids are absent.
    assert gold.get(f"/v1/prefixes/{prefix['red']}").status_code == 404
    red_run = f"/teams/red/runs/{ids['red']}"
    assert gold.get(red_run).status_code == 403  # header vs path
    for method, path in [("GET", f"/teams/gold/runs/{ids['red']}"),
                         ("GET", f"/teams/gold/runs/{ids['red']}/events"),
                         ("POST", f"/teams/gold/runs/{ids['red']}/resume")]:
        r = gold.request(method, path)
        assert r.status_code == 404 and f"no run '{ids['red']}'" in r.text, (path, r.text)
    assert gold.get("/teams/gold/runs/run-0000000000000000").status_code == 404
    assert ids["red"] not in {r["run_id"] for r in gold.get("/teams/gold/runs").json()["data"]}
    steal = gold.post("/teams/gold/runs", json={"spec": fresh_review()})
    assert steal.status_code == 403 and "team 'red'" in steal.json()["error"]["message"]
    assert gold.post("/teams/gold/runs", json={"spec_name": "review"}).status_code == 404
    assert gold.post("/teams/gold/runs", json={"spec_name": "nope"}).status_code == 404
    assert red.post(f"{red_run}/resume").status_code == 409  # succeeded runs do not resume
