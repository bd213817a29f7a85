"""Block hashing without re-hashing HOT prefixes.

At ``block_size=1`` vLLM hashes every prompt token when a request is created (a sha256
chain, about 1.5 us a token). A request that starts with a READY prefix gets that
prefix's chain copied from the registering request instead; the stock hasher then
continues after it. The result is identical to stock hashing: the chain is a pure
function of the tokens, and seeding happens only for requests whose hashes have no
extra keys (no LoRA, multimodal input, prompt embeddings or cache salt).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from granikv_engine.vllm_plugin.request_args import GraniKVArgs

Hasher = Callable[[Any], list[Any]]


@dataclass(frozen=True)
class Seed:
    prefix_id: str
    team: str
    tokens: list[int]
    hashes: list[Any]


@dataclass(frozen=True)
class SeedTable:
    """Immutable snapshot, swapped whole by the scheduler thread and read by the input
    thread, so neither needs a lock."""

    by_id: dict[str, Seed]
    by_team: dict[str, tuple[Seed, ...]]  # longest first

    @classmethod
    def build(cls, seeds: list[Seed]) -> SeedTable:
        by_team: dict[str, list[Seed]] = {}
        for s in seeds:
            by_team.setdefault(s.team, []).append(s)
        return cls({s.prefix_id: s for s in seeds},
                   {t: tuple(sorted(v, key=lambda s: -len(s.tokens))) for t, v in by_team.items()})


EMPTY = SeedTable({}, {})


class SeededBlockHasher:
    def __init__(self, stock: Hasher, default_team: str, prompt_match: bool) -> None:
        self.stock = stock
        self.default_team = default_team
        self.prompt_match = prompt_match
        self.table = EMPTY
        self.seeded_tokens = 0

    def publish(self, table: SeedTable) -> None:
        self.table = table

    def __call__(self, request: Any) -> list[Any]:
        if not request.block_hashes:
            seed = self._seed_for(request)
            if seed is not None:
                # The stock hasher continues from len(block_hashes); the caller extends
                # the same list with what it returns.
                request.block_hashes.extend(seed.hashes)
                self.seeded_tokens += len(seed.hashes)
        return self.stock(request)

    def _seed_for(self, request: Any) -> Seed | None:
        if (request.lora_request is not None or request.mm_features or request.cache_salt
                or getattr(request, "prompt_embeds", None) is not None):
            return None
        prompt = request.prompt_token_ids
        if not prompt:
            return None
        sp = request.sampling_params
        try:
            args = GraniKVArgs.from_extra_args(sp.extra_args if sp is not None else None)
        except ValueError:
            return None
        if args is not None and args.register:
            return None
        table = self.table
        if args is not None and args.prefix_id:
            cands: tuple[Seed, ...] = tuple(s for s in [table.by_id.get(args.prefix_id)] if s)
        elif self.prompt_match:
            cands = table.by_team.get((args.team if args else None) or self.default_team, ())
        else:
            cands = ()
        for s in cands:
            n = len(s.tokens)
            if n < len(prompt) and prompt[:n] == s.tokens:
                return s
        return None
