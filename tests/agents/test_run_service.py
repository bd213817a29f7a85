"""The run service's answers to a team, without Ray (``RunService`` on a SQLite file, no
LLM replicas: nothing here reaches them).

- Run ids and spec files are scoped by team: another team's is 404 with the message an
  absent one gets, and nothing of the owner's changes.
- A spec's graph is checked when it is submitted: a module outside the service's
  ``graph_modules`` is refused (400, naming the setting) and never imported.
- Errors name the spec, the run, the graph; never a folder or a replica's internals.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from granikv_agents.executor import RunExecutor, public_error
from granikv_agents.graph import RetryConfig
from granikv_agents.graphs import (
    DEFAULT_GRAPH_MODULES,
    GraphLoadError,
    GraphNotAllowed,
    allowed,
    resolve,
)
from granikv_agents.http_binding import HttpTeamBackend
from granikv_agents.schemas import AgentsOptions
from granikv_agents.service import RunService
from granikv_agents.spec_file import find_spec, load_spec
from granikv_platform.protocol import ErrorItem, Item, JsonItem

# Serve's protocol: an async __del__, which these tests await themselves; the garbage
# collector's own call of it later makes a coroutine that nobody awaits.
pytestmark = pytest.mark.filterwarnings("ignore:coroutine 'RunService.__del__':RuntimeWarning")
TEAMS = Path(__file__).resolve().parents[2] / "deploy" / "teams"
QUICK = RetryConfig(max_attempts=2, initial_interval_s=0.01, max_interval_s=0.02)
SPEC: dict[str, Any] = {
    "team": "red", "context": "A shared document.",
    "agents": [{"name": "a", "role": "Work."}, {"name": "z", "role": "Join."}],
    "workflow": {"shape": "map_reduce", "reducer": "z"},
}


def graph_spec(ref: str) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    del spec["workflow"]
    return {**spec, "graph": ref}


async def service(tmp: Path, **options: Any) -> RunService:
    """The service as Serve builds it (``llm``: no replicas; nothing below calls them)."""
    svc = RunService.__new__(RunService)
    await svc.__init__(None, {"model": {"model_id": "tiny"}, "name": "svc"},  # type: ignore[misc]
                       {"store_path": str(tmp / "runs.sqlite"), **options})
    return svc


def error(item: Item) -> tuple[int, str]:
    assert isinstance(item, ErrorItem), item
    return item.status, item.message


def test_graph_references_resolve_from_the_allow_list_only() -> None:
    default = AgentsOptions.model_validate({}).graph_modules
    assert default == DEFAULT_GRAPH_MODULES == ("granikv_agents.examples",)
    for name in ("chat", "approve"):  # what the shipped specs name
        ref = find_spec(TEAMS, name).graph
        assert ref is not None and allowed(ref, DEFAULT_GRAPH_MODULES) and callable(
            resolve(ref, DEFAULT_GRAPH_MODULES))
    assert not allowed("os:abort", DEFAULT_GRAPH_MODULES)
    assert not allowed("granikv_agents.examples_x:graph", DEFAULT_GRAPH_MODULES)
    assert allowed("my_team.graphs.a:g", ("my_team",))
    assert "this" not in sys.modules
    with pytest.raises(GraphNotAllowed, match="not among the allowed graph modules"):
        resolve("this:s", DEFAULT_GRAPH_MODULES)
    assert "this" not in sys.modules  # refused before anything was imported
    with pytest.raises(GraphLoadError, match="has no 'nothing'"):
        resolve("granikv_agents.examples.chat:nothing", DEFAULT_GRAPH_MODULES)
    with pytest.raises(GraphLoadError, match="No module named"):
        resolve("granikv_agents.examples.nothing:graph", DEFAULT_GRAPH_MODULES)


def test_a_spec_naming_a_graph_is_refused_at_submission(tmp_path: Path) -> None:
    async def go() -> list[Item]:
        svc = await service(tmp_path)
        try:
            out = [await svc.start("red", {"spec": graph_spec(ref)}) for ref in (
                "os:abort", "granikv_agents.examples.chat:nothing",
                "granikv_agents.examples.chat:graph")]
            out.append(await svc.list_runs("red"))
            return out
        finally:
            await svc.__del__()

    abort, missing, own, runs = asyncio.run(go())
    status, message = error(abort)
    assert status == 400 and "graph 'os:abort'" in message and "graph_modules" in message
    assert error(missing) == (400, "graph 'granikv_agents.examples.chat:nothing': module "
                              "'granikv_agents.examples.chat' has no 'nothing'")
    status, message = error(own)
    assert status == 400 and "threads API" in message
    assert isinstance(runs, JsonItem) and runs.body["data"] == []  # no run was started


def test_spec_errors_name_the_spec_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "broken.yaml").write_text("team: red\ncontext_file: nowhere.md\n")

    async def go() -> list[Item]:
        svc = await service(tmp_path, specs_dir=str(tmp_path / "specs"))
        try:
            return [await svc.start("red", {"spec_name": name}) for name in ("nosuch",
                                                                           "broken")]
        finally:
            await svc.__del__()

    (nosuch, broken) = asyncio.run(go())
    assert error(nosuch) == (404, "no team spec 'nosuch'")
    status, message = error(broken)
    assert status == 400 and message.startswith("broken.yaml: ") and "'nowhere.md'" in message
    assert str(tmp_path) not in message and "/" not in message


def test_another_teams_run_ids_and_spec_files_are_as_absent_as_none(tmp_path: Path) -> None:
    spec = load_spec(TEAMS / "plan.yaml")  # team blue's

    async def go() -> dict[str, Any]:
        svc = await service(tmp_path)
        try:
            store = svc.executor.store
            await store.create("run-blue0000000001", "blue", spec.model_dump_json(), "t")
            await store.set_status("run-blue0000000001", "failed", "stopped")
            before = await store.get("run-blue0000000001")
            out: dict[str, Any] = {}
            for rid in ("run-blue0000000001", "run-none0000000001"):
                out[rid] = [error(await svc.get("red", rid)),
                            error(await svc.resume("red", rid)),
                            error(*[i async for i in svc.events("red", rid)])]
            out["spec"] = [error(await svc.start("red", {"spec_name": n}))
                           for n in ("plan", "nosuch")]
            out["listed"] = await svc.list_runs("red")
            out["before"], out["after"] = before, await store.get("run-blue0000000001")
            out["owner"] = await svc.get("blue", "run-blue0000000001")
            return out
        finally:
            await svc.__del__()

    out = asyncio.run(go())
    theirs, absent = out["run-blue0000000001"], out["run-none0000000001"]
    assert [s for s, _ in theirs] == [404, 404, 404]
    assert [(s, m.replace("blue", "none")) for s, m in theirs] == absent
    assert out["spec"] == [(404, "no team spec 'plan'"), (404, "no team spec 'nosuch'")]
    assert out["listed"].body["data"] == []
    assert out["after"] == out["before"] and out["after"].status == "failed"
    owner = out["owner"]
    assert isinstance(owner, JsonItem) and owner.body["status"] == "failed"
    assert owner.body["run_id"] == "run-blue0000000001" and owner.body["team"] == "blue"


def test_a_failed_runs_error_keeps_internals_in_the_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A run whose platform cannot be reached fails after its retries; its error says
    so, and what the connection raised (on a cluster: a replica's pid, node address and
    actor id) is in the log only."""
    with socket.socket() as s:  # a loopback port that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"

    async def go() -> dict[str, Any]:
        backend = HttpTeamBackend(url, "red", timeout_s=5)
        async with RunExecutor.open(str(tmp_path / "runs.sqlite"), lambda _: backend,
                                    QUICK) as ex:
            rec = await ex.start(load_spec(TEAMS / "review.yaml"))
            done = await ex.wait(rec.run_id, 60)
            return {"status": done.status, "error": done.error,
                    "events": [e.view() async for e in ex.events(rec.run_id)]}

    with caplog.at_level(logging.WARNING, logger="granikv_agents.executor"):
        out = asyncio.run(go())
    assert out["status"] == "failed"
    assert out["error"] == ("TransientLLMError: 503: the LLM replicas did not answer, "
                            "retries included; resume the run when they are back")
    assert out["events"][-1]["error"] == out["error"]
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "ConnectError" in caplog.text and "failed" in logged
    assert "ConnectError" not in str(out["events"])


def test_public_errors() -> None:
    from granikv_agents.binding import LLMCallError, TransientLLMError

    ray_text = ("RayActorError: The actor died unexpectedly. pid=4242, ip=10.1.2.3, "
                "actor_id=7f3e00aa01")
    for e in (TransientLLMError(503, ray_text), RuntimeError(f"/srv/app/x.py: {ray_text}")):
        text = public_error(e)
        assert "4242" not in text and "10.1.2.3" not in text and "/srv" not in text, text
    assert public_error(LLMCallError(409, "team 'red': its context changed")) == \
        "LLMCallError: 409: team 'red': its context changed"  # the platform's own answer
    assert public_error(KeyError("x")) == ("KeyError in the team's graph (the details are in "
                                           "the service's log)")
