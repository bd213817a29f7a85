import torch

from granikv_engine.dispatcher import Backend
from granikv_engine.step_plan import StepPlan, hot_lengths

ARENA = (1, 101)  # HOT slots 1..100


def table(rows: list[list[int]], width: int = 12) -> torch.Tensor:
    t = torch.full((len(rows), width), 999, dtype=torch.int32)  # 999: stale entries
    for i, r in enumerate(rows):
        t[i, : len(r)] = torch.tensor(r, dtype=torch.int32)
    return t


def test_hot_length_is_contiguous_in_arena_and_bounded_by_context() -> None:
    bt = table([
        [10, 11, 12, 13, 200, 201],      # prefix 10..13 then COLD
        [10, 11, 12, 13, 202],           # same prefix
        [50, 51, 53, 300],               # run breaks at 53
        [200, 201, 202],                 # no HOT at all
        [10, 11, 12, 13, 14, 15],        # a fill row: all HOT, context ends at 3
        [99, 100, 101, 102],             # run leaves the arena at 101
    ])
    ctx = torch.tensor([5, 4, 3, 2, 3, 4])
    assert hot_lengths(bt, ctx, ARENA).tolist() == [4, 4, 2, 0, 3, 2]


def test_stale_entries_past_seq_len_are_ignored() -> None:
    bt = table([[10, 11]], width=6)
    bt[0, 2:] = torch.tensor([12, 13, 14, 15], dtype=torch.int32)  # stale but contiguous
    assert hot_lengths(bt, torch.tensor([1]), ARENA).tolist() == [1]


def test_grouping_and_lowering_mixed_prefill_decode() -> None:
    # rows: 0 decode on A(10..13), 1 prefill of 3 on A, 2 decode on B(40..41), 3 no prefix
    bt = table([
        [10, 11, 12, 13, 200, 201],
        [10, 11, 12, 13, 210, 211, 212],
        [40, 41, 220, 221],
        [230, 231, 232],
    ])
    qsl = torch.tensor([0, 1, 4, 5, 6], dtype=torch.int32)
    seq = torch.tensor([6, 7, 4, 3], dtype=torch.int32)
    plan = StepPlan.build(qsl, seq, bt, ARENA, min_hot_len=1)
    assert [(g.hot_start, g.hot_len, g.rows, g.num_queries, g.suffix_tokens)
            for g in plan.groups] == [(10, 4, (0, 1), 4, 5), (40, 2, (2,), 1, 2)]
    k = plan.lower([Backend.CASCADE, Backend.PAGED])
    assert k.kv_pos_start.tolist() == [4, 4, 0, 0]
    assert k.kv_seq_lens.tolist() == [2, 3, 4, 3]
    assert k.max_kv == 4 and k.max_q == 3
    assert k.block_table[0, :2].tolist() == [200, 201]
    assert k.block_table[1, :3].tolist() == [210, 211, 212]
    assert k.block_table[2, :4].tolist() == [40, 41, 220, 221]
    assert k.cascade_q_index.tolist() == [0, 1, 2, 3]
    assert [(c.hot_start, c.hot_len, c.q_begin, c.q_end) for c in k.cascade] == [(10, 4, 0, 4)]
    indptr, indices = k.kv_csr()
    assert indptr.tolist() == [0, 2, 5, 9, 12]
    assert indices.tolist() == [200, 201, 210, 211, 212, 40, 41, 220, 221, 230, 231, 232]


def test_min_hot_len_drops_short_groups() -> None:
    bt = table([[10, 11, 200], [50, 201]])
    plan = StepPlan.build(torch.tensor([0, 1, 2], dtype=torch.int32),
                          torch.tensor([3, 2], dtype=torch.int32), bt, ARENA, min_hot_len=2)
    assert [g.rows for g in plan.groups] == [(0,)]
    assert plan.hot_lens.tolist() == [2, 0]


def test_cascade_query_index_is_group_major() -> None:
    bt = table([[60, 61, 200], [10, 11, 201], [60, 61, 202]])
    qsl = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    plan = StepPlan.build(qsl, torch.tensor([3, 3, 3], dtype=torch.int32), bt, ARENA)
    k = plan.lower([Backend.CASCADE, Backend.CASCADE])
    assert [g.hot_start for g in plan.groups] == [10, 60]
    assert k.cascade_q_index.tolist() == [1, 0, 2]
    assert [(c.q_begin, c.q_end) for c in k.cascade] == [(0, 1), (1, 3)]


def test_empty_step() -> None:
    plan = StepPlan.build(torch.zeros(1, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
                          torch.zeros(0, 4, dtype=torch.int32), ARENA)
    assert plan.groups == () and plan.lower([]).max_kv == 0


def test_cascade_meta_is_the_varlen_form_of_the_groups() -> None:
    bt = table([[60, 61, 62, 200], [10, 11, 201], [60, 61, 62, 202], [10, 11, 203]])
    qsl = torch.tensor([0, 1, 2, 3, 4], dtype=torch.int32)
    plan = StepPlan.build(qsl, torch.tensor([4, 3, 4, 3], dtype=torch.int32), bt, ARENA)
    k = plan.lower([Backend.CASCADE, Backend.CASCADE])
    m = k.cascade_dev
    assert m is not None and not m.identity
    assert m.cu_q.tolist() == [0, 2, 4] and m.cu_k.tolist() == [10, 60, 63]
    assert m.seqused_k.tolist() == [2, 3] and (m.max_q, m.max_k) == (2, 3)
    one = StepPlan.build(qsl[:3], torch.tensor([4, 4], dtype=torch.int32), bt[[0, 2]], ARENA)
    assert one.lower([Backend.CASCADE]).cascade_dev.identity  # type: ignore[union-attr]
    assert plan.lower([Backend.PAGED, Backend.PAGED]).cascade_dev is None


def test_host_binary_search_equals_the_full_scan() -> None:
    """Rows as the scheduler builds them: an optional leading HOT run (a prefix of some
    registered range), then COLD slots outside the arena, then stale entries."""
    import numpy as np

    from granikv_engine.step_plan import hot_lengths_host

    rng = np.random.default_rng(0)
    arena = (1, 401)
    for _ in range(200):
        b, width = int(rng.integers(1, 12)), 64
        bt = rng.integers(401, 5000, size=(b, width)).astype(np.int32)  # COLD/stale
        ctx = rng.integers(0, width, size=b)
        for i in range(b):
            if rng.random() < 0.7:
                start = int(rng.integers(1, 400))
                run = int(rng.integers(1, min(width, 401 - start) + 1))
                bt[i, :run] = np.arange(start, start + run)
                if rng.random() < 0.3 and run < width:  # a COLD slot right after the arena
                    bt[i, run] = start + run if start + run >= 401 else 4999
        got = hot_lengths_host(bt, ctx, arena)
        ref = hot_lengths(torch.from_numpy(bt), torch.from_numpy(ctx), arena)
        assert got.tolist() == ref.tolist()


def _team_rows(rng, b: int, width: int, arena: tuple[int, int]):  # type: ignore[no-untyped-def]
    """Rows of a few teams: most rows of a start share its run; some are shorter (a
    prompt that is the prefix itself, a fill still prefilling) or longer; some have no
    HOT run; COLD slots after the run sometimes continue the arena's numbering."""
    import numpy as np

    bt = rng.integers(arena[1], 5000, size=(b, width)).astype(np.int32)
    ctx = rng.integers(0, width, size=b)
    starts = [1, 50, 200]  # 200 lies outside the smaller arena: never HOT there

    def longest(s: int) -> int:
        return max(1, min(width, arena[1] - s)) if s < arena[1] else width

    runs = {s: int(rng.integers(1, longest(s) + 1)) for s in starts}
    for i in range(b):
        if rng.random() < 0.85:
            s = starts[int(rng.integers(0, 3))]
            run = runs[s] if rng.random() < 0.8 else int(rng.integers(1, longest(s) + 1))
            bt[i, :run] = np.arange(s, s + run)
            if rng.random() < 0.3 and run < width and s + run >= arena[1]:
                bt[i, run] = s + run
    return bt, ctx


def test_host_search_equals_the_full_scan_when_rows_share_starts() -> None:
    import numpy as np

    from granikv_engine.step_plan import hot_lengths_host

    rng = np.random.default_rng(1)
    for arena in ((1, 401), (1, 120)):
        for _ in range(300):
            bt, ctx = _team_rows(rng, int(rng.integers(1, 40)), 64, arena)
            got = hot_lengths_host(bt, ctx, arena)
            ref = hot_lengths(torch.from_numpy(bt), torch.from_numpy(ctx), arena)
            assert got.tolist() == ref.tolist()


def test_group_rows_equals_a_plain_grouping() -> None:
    import numpy as np

    from granikv_engine.step_plan import group_rows

    rng = np.random.default_rng(2)
    arena = (1, 401)
    for _ in range(300):
        b = int(rng.integers(1, 40))
        bt, _ = _team_rows(rng, b, 64, arena)
        q = rng.integers(1, 5, size=b)
        qsl = np.concatenate([[0], np.cumsum(q)])
        seqs = rng.integers(1, 64, size=b) + q
        seqs = np.minimum(seqs, 64)
        min_len = int(rng.choice([1, 16]))
        hot, groups = group_rows(qsl, seqs, bt, arena, min_len)
        ref_hot = hot_lengths(torch.from_numpy(bt), torch.from_numpy(seqs - q), arena).numpy()
        by: dict[tuple[int, int], list[int]] = {}
        for i in range(b):
            if ref_hot[i] >= min_len:
                by.setdefault((int(bt[i, 0]), int(ref_hot[i])), []).append(i)
        want = [(s, n, tuple(r), int(q[r].sum()), int((seqs[r] - n).sum()))
                for (s, n), r in sorted(by.items())]
        assert [(g.hot_start, g.hot_len, g.rows, g.num_queries, g.suffix_tokens)
                for g in groups] == want
        assert hot.tolist() == np.where(ref_hot >= min_len, ref_hot, 0).tolist()
