"""Each turn's own messages, from the team and the finished turns (pure).

The platform puts the team's shared context first (the HOT prefix); these messages come
after it and are the agent's own: its role, the task, its earlier answers and what it
is shown of the others' (COLD slots). A message is ``[role, content]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from granikv_agents.state import Turn, TurnInput
from granikv_agents.team import Agent, Team

Message = list[str]


def role_message(agent: Agent) -> Message:
    return ["system", f"You are {agent.name}. {agent.role}"]


def work_turns(team: Team, turns: Sequence[Turn], round_: int) -> list[TurnInput]:
    """The parallel turns of ``round_``: one per worker."""
    return [TurnInput(agent=a.name, round=round_, kind="work",
                      messages=_worker_messages(team, a, turns, round_))
            for a in team.workers]


def plan_turn(team: Team, turns: Sequence[Turn], round_: int) -> TurnInput:
    planner = team.planner
    assert planner is not None, "plan_turn is for pipeline teams"
    names = ", ".join(a.name for a in team.workers)
    msgs = [role_message(planner),
            ["user", f"{team.task}\n\nPlan the work, one step for each executor: {names}."]]
    for k in range(1, round_):
        msgs += [["assistant", _text(_of(turns, planner.name, k))],
                 ["user", f"Round {k + 1}. The executors reported:\n"
                          f"{_listing(_round(turns, k, 'work'))}\nRevise the plan."]]
    return TurnInput(agent=planner.name, round=round_, kind="plan", messages=msgs)


def reduce_turn(team: Team, turns: Sequence[Turn]) -> TurnInput:
    last = team.limits.rounds
    reducer = team.reducer
    shown = _listing(_round(turns, last, "work"))
    plan = _of(turns, team.planner.name, last) if team.planner else None
    head = f"The plan:\n{_text(plan)}\n\n" if plan is not None else ""
    ask = {"map_reduce": "Join these findings into one report.",
           "debate": "Judge the debate: say which argument wins, and why.",
           "pipeline": "Integrate the executors' results into one answer."}
    return TurnInput(agent=reducer.name, round=last, kind="reduce", messages=[
        role_message(reducer),
        ["user", f"{team.task}\n\n{head}Round {last}:\n{shown}\n\n"
                 f"{ask[team.shape.shape]}"]])


def _worker_messages(team: Team, agent: Agent, turns: Sequence[Turn],
                     round_: int) -> list[Message]:
    msgs = [role_message(agent), ["user", _first_ask(team, turns)]]
    for k in range(1, round_):
        msgs += [["assistant", _text(_of(turns, agent.name, k))],
                 ["user", _follow_up(team, agent, turns, k + 1)]]
    return msgs


def _first_ask(team: Team, turns: Sequence[Turn]) -> str:
    if team.planner is None:
        return team.task
    return f"{team.task}\n\nThe plan:\n{_text(_of(turns, team.planner.name, 1))}\n\nDo your step."


def _follow_up(team: Team, agent: Agent, turns: Sequence[Turn], round_: int) -> str:
    shape = team.shape.shape
    if shape == "debate":
        others = [t for t in _round(turns, round_ - 1, "work") if t["agent"] != agent.name]
        return f"Round {round_}. The others argued:\n{_listing(others)}\nAnswer them."
    if shape == "pipeline":
        plan = _of(turns, team.planner.name, round_) if team.planner else None
        return f"Round {round_}. The revised plan:\n{_text(plan)}\n\nDo your step."
    return f"Round {round_}. Improve your answer."


def _round(turns: Iterable[Turn], round_: int, kind: str) -> list[Turn]:
    return sorted((t for t in turns if t["round"] == round_ and t["kind"] == kind),
                  key=lambda t: t["index"])


def _of(turns: Iterable[Turn], agent: str, round_: int) -> Turn | None:
    return next((t for t in turns if t["agent"] == agent and t["round"] == round_), None)


def _text(turn: Turn | None) -> str:
    text = turn["text"].strip() if turn is not None else ""
    return text or "(no answer)"


def _listing(turns: Iterable[Turn]) -> str:
    return "\n".join(f"- {t['agent']}: {_text(t)}" for t in turns)
