"""The end-to-end workloads, as data: teams, their contexts, and each agent's request(s).

W1-W5: every request = its team's context + 512 own tokens, generating 256 tokens
(ignore_eos, greedy); teams interleaved in submission order. W6 (skewed teams): each
team's share of the requests, own and generated lengths drawn per request, submission
order shuffled with a fixed seed. W7 (multi-turn agents): each agent's turn k prompt is
its team's context + its own history (earlier turns' new and generated tokens) + new
tokens; turns run one after another. Lengths and order are the same in every engine;
``salt`` changes only the tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

SUFFIX = 512
OUTPUT = 256
# vLLM's max_num_seqs for the end-to-end runs, unless e2e.py's --max-num-seqs says otherwise
MAX_NUM_SEQS = 512


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    prefix_lens: tuple[int, ...]  # one context per team
    agents: int  # requests (a turn's requests, with turns > 1)
    stock_ref_tok_s: float  # stock vLLM 0.26 on an H200 before this project (0: none)
    target_x: float  # speedup over stock (0: the target is a share of the ceiling)
    ceiling_x: float | None = None  # a prior estimate of the best possible speedup
    tp: int = 1  # tensor-parallel degree (GPUs of one engine)
    suffix: int = SUFFIX  # own new tokens a request (a turn); the low end with suffix_max
    output: int = OUTPUT  # generated tokens a request (a turn); the low end with output_max
    shares: tuple[float, ...] = ()  # each team's share of the requests (empty: even)
    suffix_max: int = 0  # > 0: own tokens uniform in suffix..suffix_max per request
    output_max: int = 0  # > 0: generated tokens uniform in output..output_max
    turns: int = 1
    target_of_ceiling: float = 0.0  # > 0: the target as a share of the measured ceiling

    def max_len_at(self, scale: float = 1.0) -> int:
        """The longest sequence (prompt + generated tokens) at a length scale."""
        own = scaled(max(self.suffix, self.suffix_max), scale)
        out = scaled(max(self.output, self.output_max), scale)
        return scaled(max(self.prefix_lens), scale) + self.turns * (own + out)

    @property
    def max_len(self) -> int:
        return self.max_len_at(1.0)


class Request(NamedTuple):
    team: int
    prompt: list[int]
    output: int  # tokens to generate (min_tokens = max_tokens)
    context: int  # the team context's tokens at the prompt's start
    fresh: int  # prompt tokens no cache can hold: new ones (+ last turn's final token)


_W3 = tuple(2048 * i for i in range(1, 9))  # 8 teams, Lp = 2K, 4K, ..., 16K
_W6 = (1536, 3072, 5120, 8192, 12288, 16384)

WORKLOADS = {w.name: w for w in (
    Workload("W1", "llama-3.1-8b", (16384,), 256, 2070, 2.7, 2.95),
    Workload("W2", "llama-3.1-8b", (16384,), 512, 2130, 2.7, 2.95),
    Workload("W3", "llama-3.1-8b", _W3, 256, 2440, 2.5, 2.9),
    Workload("W4", "qwen2.5-14b", (16384,), 256, 1390, 2.5, 2.7),
    Workload("W5", "llama-3.1-8b", (1024,), 8, 1400, 0.98, 1.0),
    # Heterogeneous agent traffic: skewed teams with varied lengths; multi-turn agents.
    Workload("W6", "llama-3.1-8b", _W6, 384, 0, 0.0, suffix=128, output=64,
             shares=(0.30, 0.25, 0.18, 0.12, 0.10, 0.05), suffix_max=1536, output_max=512,
             target_of_ceiling=0.85),
    Workload("W7", "llama-3.1-8b", (4096, 8192, 12288, 16384), 128, 0, 0.0, suffix=256,
             output=128, turns=4, target_of_ceiling=0.85),
    # Tensor parallel: W1's and W3's shapes on bigger models, several GPUs.
    Workload("W1-TP2", "qwen2.5-14b", (16384,), 256, 0, 2.3, tp=2),
    Workload("W3-TP2", "qwen2.5-14b", _W3, 256, 0, 2.3, tp=2),
    Workload("W1-TP4", "qwen2.5-32b", (16384,), 256, 0, 1.9, tp=4),
    Workload("W3-TP4", "qwen2.5-32b", _W3, 256, 0, 1.9, tp=4),
)}


def team_prefix(workload: str, team: int, length: int, vocab: int) -> list[int]:
    """Deterministic: the same prefix in every engine; W1 and W2 share theirs."""
    key = "W1" if workload == "W2" else workload
    rng = random.Random(f"{key}-{team}-{length}")
    return [_token(rng, vocab) for _ in range(length)]


def _token(rng: random.Random, vocab: int) -> int:
    lo = min(1000, vocab // 10)  # clear of special tokens at both ends
    return rng.randrange(lo, vocab - lo)


def scaled(n: int, scale: float) -> int:
    return n if scale == 1.0 else max(2, int(n * scale))


def prefixes(w: Workload, vocab: int, scale: float = 1.0,
             context: int | None = None) -> list[list[int]]:
    """Each team's context; ``context`` cuts every one to its first tokens (the
    ceiling's run without a shared prefix)."""
    out = [team_prefix(w.name, t, scaled(n, scale), vocab) for t, n in enumerate(w.prefix_lens)]
    return [p[:context] for p in out] if context else out


def team_sizes(shares: tuple[float, ...], n: int) -> list[int]:
    """Requests per team: ``n`` split by ``shares`` (largest remainders, ties to the
    first team), summing to ``n``."""
    raw = [s * n / sum(shares) for s in shares]
    sizes = [int(x) for x in raw]
    by_rest = sorted(range(len(raw)), key=lambda t: (sizes[t] - raw[t], t))
    for t in by_rest[: n - sum(sizes)]:
        sizes[t] += 1
    return sizes


def mix(w: Workload, scale: float = 1.0) -> list[tuple[int, int, int]]:
    """(team, own tokens, generated tokens) of every request, in submission order."""
    if not w.shares:  # teams interleaved, fixed lengths
        return [(i % len(w.prefix_lens), scaled(w.suffix, scale), scaled(w.output, scale))
                for i in range(w.agents)]
    rng = random.Random(f"{w.name}-mix")
    teams = [t for t, k in enumerate(team_sizes(w.shares, w.agents)) for _ in range(k)]
    rows = [(t, scaled(rng.randint(w.suffix, w.suffix_max or w.suffix), scale),
             scaled(rng.randint(w.output, w.output_max or w.output), scale)) for t in teams]
    rng.shuffle(rows)
    return rows


def requests(w: Workload, vocab: int, scale: float = 1.0, salt: str = "",
             context: int | None = None, turn: int = 0,
             histories: list[list[int]] | None = None) -> list[Request]:
    """Every agent's request of one turn. ``scale`` shrinks the lengths (CPU dry runs
    only); ``salt`` draws other own tokens (a second run on one engine must not hit the
    first run's in the prefix cache); ``context`` cuts the team contexts; ``histories``
    (later turns) holds each agent's earlier new and generated tokens."""
    pre = prefixes(w, vocab, scale, context)
    out = []
    for i, (t, own, gen) in enumerate(mix(w, scale)):
        rng = random.Random(f"{w.name}-agent-{i}{f'-turn-{turn}' if turn else ''}{salt}")
        new = [_token(rng, vocab) for _ in range(own)]
        past = histories[i] if histories else []
        out.append(Request(t, pre[t] + past + new, gen, len(pre[t]), own + (1 if past else 0)))
    return out


def next_histories(reqs: list[Request], generated: list[list[int]]) -> list[list[int]]:
    """Each agent's history after a turn: its prompt past the context, then what it
    generated."""
    return [r.prompt[r.context:] + list(g) for r, g in zip(reqs, generated, strict=True)]
