"""bench/workloads.py: W6's skewed mix and W7's turns are deterministic and as specified;
W1-W5's requests stay what they were."""

from __future__ import annotations

import random
from collections import Counter

from granikv_engine.bench.workloads import (
    WORKLOADS,
    _token,
    mix,
    next_histories,
    prefixes,
    requests,
    team_prefix,
    team_sizes,
)

VOCAB = 128256


def test_team_sizes_split_by_largest_remainder() -> None:
    assert team_sizes((0.30, 0.25, 0.18, 0.12, 0.10, 0.05), 384) == [115, 96, 69, 46, 39, 19]
    assert team_sizes((1, 1, 1), 4) == [2, 1, 1]  # ties: the first team


def test_w6_mix_is_skewed_varied_and_shuffled() -> None:
    w = WORKLOADS["W6"]
    rows = mix(w)
    assert rows == mix(w)  # the same in every engine
    assert Counter(t for t, _, _ in rows) == dict(enumerate([115, 96, 69, 46, 39, 19]))
    assert all(128 <= own <= 1536 and 64 <= out <= 512 for _, own, out in rows)
    assert len({own for _, own, _ in rows}) > 200 and len({o for _, _, o in rows}) > 200
    assert [t for t, _, _ in rows] != sorted(t for t, _, _ in rows)
    assert w.max_len == 16384 + 1536 + 512


def test_w6_requests_differ_by_salt_in_tokens_only() -> None:
    w = WORKLOADS["W6"]
    a, b = requests(w, VOCAB, salt="-a"), requests(w, VOCAB, salt="-b")
    assert [(r.team, len(r.prompt), r.output) for r in a] == [
        (r.team, len(r.prompt), r.output) for r in b]
    assert a[0].prompt != b[0].prompt
    ctx = prefixes(w, VOCAB)
    for r, (t, own, out) in zip(a, mix(w), strict=True):
        assert r.prompt[: r.context] == ctx[t] and r.fresh == own and r.output == out


def test_the_ceiling_run_cuts_every_context_to_its_first_tokens() -> None:
    w = WORKLOADS["W6"]
    full, cut = requests(w, VOCAB), requests(w, VOCAB, context=16)
    for f, c in zip(full, cut, strict=True):
        assert c.context == 16 and c.prompt[:16] == f.prompt[:16]
        assert c.prompt[16:] == f.prompt[f.context:]  # the same own tokens


def test_w7_turns_carry_each_agent_s_history() -> None:
    w = WORKLOADS["W7"]
    first = requests(w, VOCAB)
    assert Counter(r.team for r in first) == {0: 32, 1: 32, 2: 32, 3: 32}
    assert {(len(r.prompt) - r.context, r.output, r.fresh) for r in first} == {(256, 128, 256)}
    generated = [[7] * 128 for _ in first]
    hist = next_histories(first, generated)
    second = requests(w, VOCAB, turn=1, histories=hist)
    for a, b, h in zip(first, second, hist, strict=True):
        assert b.prompt[: b.context + 384] == a.prompt + [7] * 128
        assert len(b.prompt) == b.context + 384 + 256 and b.fresh == 257
        assert b.prompt[-256:] != a.prompt[-256:]  # new tokens every turn
        assert h == a.prompt[a.context:] + [7] * 128
    assert w.max_len == 16384 + 4 * (256 + 128)


def test_w1_requests_are_unchanged() -> None:
    w = WORKLOADS["W1"]
    reqs = requests(w, VOCAB, salt="-run0")
    rng = random.Random("W1-agent-3-run0")
    own = [_token(rng, VOCAB) for _ in range(512)]
    assert reqs[3].prompt == team_prefix("W1", 0, 16384, VOCAB) + own
    assert (reqs[3].output, reqs[3].fresh, len(reqs)) == (256, 512, 256)
    w3 = requests(WORKLOADS["W3"], VOCAB)
    assert [r.team for r in w3[:10]] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]
