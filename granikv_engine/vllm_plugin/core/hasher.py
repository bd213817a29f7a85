"""Block hashing without re-hashing HOT prefixes.

vLLM hashes a request's prompt when the request is created (a sha256 chain; GraniKV
hashes one link per ``hash_chunk`` tokens, ``chunk_cache.py``). A request that starts
with a READY prefix gets the chain of that prefix's whole chunks copied from the
registering request instead; the stock hasher then continues after it. The result is
identical to stock hashing: the chain is a pure function of the tokens, and seeding
happens only for requests whose hashes have no extra keys (no LoRA, multimodal input,
prompt embeddings or cache salt).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from granikv_engine.prefix_registry import PrefixError
from granikv_engine.vllm_plugin.core.binding import decide, starts_with
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

    # ---- binding.PrefixIndex over READY prefixes with their hashes -------------------
    def named(self, prefix_id: str, team: str) -> list[int]:
        seed = self.by_id.get(prefix_id)
        if seed is None or seed.team != team:
            raise PrefixError(f"no seed for prefix {prefix_id!r} of team {team!r}")
        return seed.tokens

    def longest(self, team: str, prompt: Sequence[int]) -> str | None:
        for s in self.by_team.get(team, ()):
            if starts_with(prompt, s.tokens):
                return s.prefix_id
        return None


EMPTY = SeedTable({}, {})


def plain_hashing(request: Any) -> bool:
    """The request's block hashes carry no extra keys (no LoRA, multimodal input, cache
    salt or prompt embeddings): they are a function of its tokens alone."""
    return (request.lora_request is None and not request.mm_features
            and not request.cache_salt and getattr(request, "prompt_embeds", None) is None)


class SeededBlockHasher:
    def __init__(self, stock: Hasher, default_team: str, prompt_match: bool,
                 chunk: int = 1) -> None:
        self.stock = stock
        self.default_team = default_team
        self.prompt_match = prompt_match
        self.chunk = chunk  # tokens per hash
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
                self.seeded_tokens += len(seed.hashes) * self.chunk
        return self.stock(request)

    def _seed_for(self, request: Any) -> Seed | None:
        if not plain_hashing(request):
            return None
        prompt = request.prompt_token_ids
        if not prompt:
            return None
        sp = request.sampling_params
        table = self.table
        try:
            args = GraniKVArgs.from_extra_args(sp.extra_args if sp is not None else None)
            binding = decide(args, prompt, table, self.default_team, self.prompt_match)
        except (PrefixError, ValueError):  # the scheduler reports it
            return None
        if binding is None or binding.fill or binding.prefix_id is None:
            return None
        return table.by_id.get(binding.prefix_id)
