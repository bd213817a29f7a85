"""What the LangGraph checkpointer stores: the run state and the Send payloads.

Plain TypedDicts of str/int/bool/list, so the SQLite checkpoints are JSON-like and any
later version of this package can read them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from typing_extensions import TypedDict  # pydantic reads it on 3.11 (graph schemas)

TurnKind = Literal["plan", "work", "reduce"]


class ContextPin(TypedDict):
    """The team's HOT prefix as the platform reported it (read back, not assumed)."""

    prefix_id: str
    length: int  # tokens
    state: str  # ready (in HOT), filling, cold
    pinned: bool
    hot_start: int | None
    reused: bool  # already registered with this text: the run did not register it


class Turn(TypedDict):
    """One finished agent turn (one LLM call)."""

    agent: str
    index: int  # the agent's position in the spec
    round: int
    kind: TurnKind
    text: str
    prompt_tokens: int
    completion_tokens: int


class TurnInput(TypedDict):
    """A Send payload: the agent's own messages (the platform puts the shared context
    first)."""

    agent: str
    round: int
    kind: TurnKind
    messages: list[list[str]]  # [[role, content], ...]


class AgentTurnInput(TurnInput):
    """What ``Send`` carries to an agent turn: its input and the run's context pin."""

    context: ContextPin


def add_turns(left: list[Turn] | None, right: list[Turn] | None) -> list[Turn]:
    """Reducer of parallel turns: all of them, in (round, plan/work/reduce, agent)
    order whatever order the turns finished in."""
    order = {"plan": 0, "work": 1, "reduce": 2}
    return sorted([*(left or []), *(right or [])],
                  key=lambda t: (t["round"], order[t["kind"]], t["index"]))


class TeamState(TypedDict, total=False):
    task: str
    round: int  # the round the next fan-out runs (1-based)
    context: ContextPin  # pinned by register_context
    context_after: ContextPin  # read back by finish: was it still pinned at the end?
    turns: Annotated[list[Turn], add_turns]
    result: str  # the reducer's answer
