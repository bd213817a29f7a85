"""Which prefix a request binds to: the one decision, shared by the block hasher (input
thread, over the seed table) and the scheduler (scheduler thread, over the registry).

A request's GraniKV arguments (``request_args.py``) decide it:
- ``register``: the request fills a prefix (the scheduler registers it; no hit);
- ``prefix_id``: a hit on that prefix of the caller's team, if the prompt starts with
  its tokens and is longer (the engine computes at least one token of every prompt);
- neither, with prompt matching on: a hit on the longest READY prefix of the team that
  the prompt starts with.
Both callers answer through a ``PrefixIndex``; the scheduler's index also binds named
prefixes that are still filling (served from HOT if READY when first scheduled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from granikv_engine.prefix_registry import PrefixError
from granikv_engine.vllm_plugin.request_args import GraniKVArgs


class PrefixIndex(Protocol):
    def named(self, prefix_id: str, team: str) -> Sequence[int]:
        """The tokens of ``prefix_id``; raises PrefixError (not found, other team)."""
        ...

    def longest(self, team: str, prompt: Sequence[int]) -> str | None:
        """The longest READY prefix of ``team`` that ``prompt`` strictly starts with."""
        ...


@dataclass(frozen=True)
class Binding:
    prefix_id: str | None  # None: a fill whose id the registry picks
    team: str
    fill: bool = False


def decide(args: GraniKVArgs | None, prompt: Sequence[int], index: PrefixIndex,
           default_team: str, prompt_match: bool) -> Binding | None:
    """The binding of a request with ``args`` and ``prompt``; None when it has none.
    Raises PrefixError when it names a prefix it cannot bind to (another team's, an
    unknown one, or one its prompt does not start with)."""
    team = (args.team if args else None) or default_team
    if args is not None and args.register:
        return Binding(args.prefix_id, team, fill=True)
    if args is not None and args.prefix_id:
        tokens = index.named(args.prefix_id, team)
        if not starts_with(prompt, tokens):
            raise PrefixError(f"prompt does not start with prefix {args.prefix_id!r}")
        return Binding(args.prefix_id, team)
    if prompt_match:
        pid = index.longest(team, prompt)
        return Binding(pid, team) if pid is not None else None
    return None


def starts_with(prompt: Sequence[int], tokens: Sequence[int]) -> bool:
    """``prompt`` is longer than ``tokens`` and begins with them."""
    n = len(tokens)
    if len(prompt) <= n:
        return False
    head = prompt[:n]
    return head == tokens if type(head) is type(tokens) else tuple(head) == tuple(tokens)
