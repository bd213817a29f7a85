"""Team specs: the example files load; every invalid spec says why."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from granikv_agents.graphs import team_graph
from granikv_agents.schemas import AgentsOptions, RunCreate
from granikv_agents.spec import TeamSpec
from granikv_agents.spec_file import SpecFileError, find_spec, load_spec, spec_names
from granikv_agents.team import Sampling

TEAMS = Path(__file__).resolve().parents[2] / "deploy" / "teams"
BASE: dict[str, Any] = {
    "team": "red", "context": "A shared document.",
    "agents": [{"name": "a", "role": "Work."}, {"name": "b", "role": "Work."},
               {"name": "z", "role": "Join."}],
    "workflow": {"shape": "map_reduce", "reducer": "z"},
}


def spec(**over: Any) -> TeamSpec:
    data = copy.deepcopy(BASE)
    data.update(over)
    return TeamSpec.model_validate(data)


def test_the_example_teams_load() -> None:
    assert spec_names(TEAMS) == ["approve", "chat", "debate", "plan", "review"]
    review = load_spec(TEAMS / "review.yaml").to_team()
    assert (review.name, review.workflow.shape, len(review.workers)) == ("red", "map_reduce", 8)
    assert review.context == (TEAMS.parent / "contexts" / "red.md").read_text()
    assert review.reducer.name == "synthesizer" and review.calls_per_run() == 9
    debate = find_spec(TEAMS, "debate").to_team()
    assert debate.limits.rounds == 2 and debate.calls_per_run() == 3 * 2 + 1
    assert "structured debate" in debate.context  # inline
    plan = find_spec(TEAMS, "plan").to_team()
    assert plan.planner is not None and plan.planner.name == "planner"
    assert [a.name for a in plan.workers] == ["builder", "tester", "deployer"]
    chat = find_spec(TEAMS, "chat").to_team()
    assert chat.workflow is None and chat.graph == "granikv_agents.examples.chat:graph"
    assert set(team_graph(chat).nodes) == {"__start__", "register_context", "answer"}
    approve = find_spec(TEAMS, "approve").to_team()
    assert set(team_graph(approve).nodes) == {"__start__", "draft", "review"}


def test_sampling_merges_agent_over_team_over_limits() -> None:
    team = spec(sampling={"temperature": 0.7, "max_tokens": 12}, limits={"max_tokens": 40},
                agents=[{"name": "a", "role": "r", "sampling": {"seed": 3}},
                        {"name": "b", "role": "r", "sampling": {"max_tokens": 40,
                                                                 "temperature": 0}},
                        {"name": "z", "role": "r"}]).to_team()
    assert team.agent("a").sampling == Sampling(max_tokens=12, temperature=0.7, seed=3)
    assert team.agent("b").sampling == Sampling(max_tokens=40, temperature=0.0, seed=None)
    bare = spec().to_team()
    assert bare.agent("z").sampling == Sampling(max_tokens=256, temperature=0.0, seed=None)
    assert spec().to_team(task="Other task.").task == "Other task."


@pytest.mark.parametrize(("over", "message"), [
    ({"team": "Red Team"}, "must match"),
    ({"context": "   "}, "context is empty"),
    ({"context": None}, "exactly one of 'context' or 'context_file'"),
    ({"context_file": "red.md"}, "exactly one of"),
    ({"context": None, "context_file": "../contexts/red.md"}, "only read from spec files"),
    ({"agents": [{"name": "a", "role": "r"}, {"name": "a", "role": "r"},
                 {"name": "z", "role": "r"}]}, "duplicate agent names ['a']"),
    ({"agents": [{"name": "Bad Name", "role": "r"}, {"name": "z", "role": "r"}]},
     "agent name 'Bad Name'"),
    ({"agents": [{"name": "a", "role": ""}, {"name": "z", "role": "r"}]}, "at least 1"),
    ({"agents": [{"name": "z", "role": "r"}]}, "at least 2"),
    ({"workflow": {"shape": "map_reduce", "reducer": "nobody"}}, "reducer 'nobody'"),
    ({"workflow": {"shape": "star", "reducer": "z"}}, "map_reduce"),
    ({"workflow": {"shape": "debate", "reducer": "z"}}, "limits.rounds >= 2"),
    ({"workflow": {"shape": "debate", "reducer": "z"}, "limits": {"rounds": 2},
      "agents": [{"name": "a", "role": "r"}, {"name": "z", "role": "r"}]}, "two debaters"),
    ({"workflow": {"shape": "pipeline", "reducer": "z"}}, "planner is required"),
    ({"workflow": {"shape": "map_reduce", "reducer": "z", "planner": "a"}}, "only allowed"),
    ({"workflow": {"shape": "pipeline", "reducer": "z", "planner": "z"}}, "different agents"),
    ({"workflow": {"shape": "pipeline", "reducer": "z", "planner": "a"},
      "agents": [{"name": "a", "role": "r"}, {"name": "z", "role": "r"}]}, "a worker"),
    ({"limits": {"max_tokens": 8}, "sampling": {"max_tokens": 9}},
     "sampling.max_tokens 9 exceeds limits.max_tokens 8"),
    ({"limits": {"max_tokens": 8}, "agents": [
        {"name": "a", "role": "r", "sampling": {"max_tokens": 9}},
        {"name": "z", "role": "r"}]}, "agents.a.sampling.max_tokens 9"),
    ({"limits": {"concurrency": 0}}, "greater than or equal to 1"),
    ({"limits": {"rounds": 17}}, "less than or equal to 16"),
    ({"sampling": {"temperature": 3}}, "less than or equal to 2"),
    ({"surprise": 1}, "Extra inputs are not permitted"),
    ({"graph": "granikv_agents.examples.chat:graph"}, "exactly one of 'workflow' or 'graph'"),
    ({"workflow": None}, "exactly one of 'workflow' or 'graph'"),
    ({"workflow": None, "graph": "no colon"}, "should match pattern"),
])
def test_invalid_specs_say_why(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):
        spec(**over)


def test_spec_files_resolve_context_relative_to_themselves(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "ctx.md").write_text("The document.")
    data = {**BASE, "context": None, "context_file": "docs/ctx.md"}
    import yaml

    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    loaded = load_spec(tmp_path / "t.yaml")
    assert loaded.context == "The document." and loaded.context_file is None
    again = TeamSpec.model_validate_json(loaded.model_dump_json())  # as stored for resume
    assert again.to_team() == loaded.to_team()
    (tmp_path / "bad.yaml").write_text("team: [unclosed")
    with pytest.raises(SpecFileError, match="not YAML"):
        load_spec(tmp_path / "bad.yaml")
    (tmp_path / "missing.yaml").write_text(yaml.safe_dump({**data, "context_file": "no.md"}))
    with pytest.raises(SpecFileError, match="no context file"):
        load_spec(tmp_path / "missing.yaml")
    with pytest.raises(SpecFileError, match="spec name"):
        find_spec(tmp_path, "../t")
    with pytest.raises(FileNotFoundError, match="no team spec 'nope'"):
        find_spec(tmp_path, "nope")


def test_run_bodies_and_service_options() -> None:
    assert RunCreate.model_validate({"spec_name": "review"}).wire()["spec"] is None
    inline = RunCreate.model_validate({"spec": BASE, "task": "T."}).wire()
    assert inline["spec"]["context"] == "A shared document." and inline["task"] == "T."
    for bad, msg in [({}, "exactly one"), ({"spec": BASE, "spec_name": "review"}, "exactly one"),
                     ({"spec_name": "../etc"}, "pattern"), ({"spec_name": "x", "y": 1}, "Extra")]:
        with pytest.raises(ValidationError, match=msg):
            RunCreate.model_validate(bad)
    opts = AgentsOptions.model_validate({})
    assert opts.specs_folder() == TEAMS
    assert opts.store_file("app").endswith("granikv-app-runs.sqlite")
    assert opts.threads_store("app").endswith("granikv-app-runs-threads.sqlite")
    pg = AgentsOptions.model_validate({"store_path": "postgresql://u@db/granikv"})
    assert pg.store_file("app") == pg.threads_store("app") == "postgresql://u@db/granikv"
    with pytest.raises(ValidationError, match="max_attempts"):
        AgentsOptions.model_validate({"retry": {"max_attempts": 0}})
