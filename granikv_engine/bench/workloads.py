"""The end-to-end workloads (DESIGN.md "Performance targets"), as data.

Every request = its team's prefix + 512 unique tokens, and generates 256 tokens
(ignore_eos, greedy). Teams are interleaved in submission order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SUFFIX = 512
OUTPUT = 256
# vLLM's max_num_seqs for the end-to-end runs, unless e2e.py's --max-num-seqs says otherwise
MAX_NUM_SEQS = 512


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    prefix_lens: tuple[int, ...]  # one per team
    agents: int
    stock_ref_tok_s: float  # stock vLLM 0.26 as measured in DESIGN.md (0: none given)
    target_x: float
    ceiling_x: float | None = None  # the estimate of the best possible speedup
    tp: int = 1  # tensor-parallel degree (GPUs of one engine)
    suffix: int = SUFFIX
    output: int = OUTPUT

    @property
    def max_len(self) -> int:
        return max(self.prefix_lens) + self.suffix + self.output


_W3 = tuple(2048 * i for i in range(1, 9))  # 8 teams, Lp = 2K, 4K, ..., 16K

WORKLOADS = {w.name: w for w in (
    Workload("W1", "llama-3.1-8b", (16384,), 256, 2070, 2.7, 2.95),
    Workload("W2", "llama-3.1-8b", (16384,), 512, 2130, 2.7, 2.95),
    Workload("W3", "llama-3.1-8b", _W3, 256, 2440, 2.5, 2.9),
    Workload("W4", "qwen2.5-14b", (16384,), 256, 1390, 2.5, 2.7),
    Workload("W5", "llama-3.1-8b", (1024,), 8, 1400, 0.98, 1.0),
    # Tensor parallel (issue 8): W1's and W3's shapes on bigger models, several GPUs.
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


def prefixes(w: Workload, vocab: int, scale: float = 1.0) -> list[list[int]]:
    return [team_prefix(w.name, t, scaled(n, scale), vocab) for t, n in enumerate(w.prefix_lens)]


def requests(w: Workload, vocab: int, scale: float = 1.0,
             salt: str = "") -> list[tuple[int, list[int]]]:
    """(team, prompt) for every agent, teams interleaved. ``scale`` shrinks the lengths
    (CPU dry runs only); ``salt`` draws other suffixes (a second run on one engine must
    not hit the first run's suffixes in the prefix cache)."""
    pre = prefixes(w, vocab, scale)
    out = []
    for i in range(w.agents):
        t = i % len(pre)
        rng = random.Random(f"{w.name}-agent-{i}{salt}")
        out.append((t, pre[t] + [_token(rng, vocab) for _ in range(scaled(w.suffix, scale))]))
    return out
