import pytest

from granikv_engine.dispatcher import (
    AttnShape,
    Backend,
    CalibrationPoint,
    CalibrationTable,
    Dispatcher,
    GroupStats,
    Regime,
    summarize,
)

LLAMA8B = AttnShape(num_q_heads=32, num_kv_heads=8, head_dim=128, hidden_size=4096)


def decode(rows: int, lp: int, suffix: int = 640) -> GroupStats:
    return GroupStats(num_rows=rows, num_queries=rows, hot_len=lp, suffix_tokens=rows * suffix)


@pytest.mark.parametrize(("rows", "lp", "want"), [
    (256, 16384, Backend.CASCADE),
    (64, 16384, Backend.CASCADE),
    (16, 4096, Backend.PAGED),   # a dense pass of 16 queries fills 8 of 132 SMs
    (1, 16384, Backend.PAGED),   # nothing to share
    (2, 64, Backend.PAGED),      # too small to pay two more launches
])
def test_roofline_choices(rows: int, lp: int, want: Backend) -> None:
    c = Dispatcher(LLAMA8B).choose(decode(rows, lp))
    assert c.backend is want and c.source == "roofline"


def test_regimes() -> None:
    d = Dispatcher(LLAMA8B)
    assert d.choose(decode(256, 16384)).regime is Regime.COMPUTE  # dense pass is GEMM-like
    assert d.choose(decode(1, 16384)).regime is Regime.MEMORY
    tp4 = Dispatcher(AttnShape(40, 8, 128, hidden_size=5120, tp=4))
    assert tp4.choose(decode(256, 128)).regime is Regime.COMMUNICATION


def test_table_overrides_roofline_and_is_deterministic() -> None:
    # a (made-up) GPU on which the cascade never pays at 16 rows
    table = CalibrationTable((
        CalibrationPoint(16, 4096, 1, cascade_us=50.0, paged_us=20.0),
        CalibrationPoint(256, 16384, 1, cascade_us=100.0, paged_us=4000.0),
    ))
    d = Dispatcher(LLAMA8B, table=table)
    small = d.choose(decode(16, 4096))
    assert small.backend is Backend.PAGED and small.source == "table"
    assert d.choose(decode(200, 16384)).backend is Backend.CASCADE
    again = Dispatcher(LLAMA8B, table=CalibrationTable.from_json(table.to_json()))
    assert [again.choose(decode(r, lp)) for r, lp in [(16, 4096), (200, 16384)]] == \
        [d.choose(decode(r, lp)) for r, lp in [(16, 4096), (200, 16384)]]


def test_force_and_summary() -> None:
    d = Dispatcher(LLAMA8B, force=Backend.PAGED)
    choices = d.choose_all([decode(256, 16384), decode(1, 100)])
    assert {c.backend for c in choices} == {Backend.PAGED}
    assert {c.source for c in choices} == {"forced"}
    assert summarize(choices)["backend.paged"] == 2


def test_tp_halves_per_rank_work() -> None:
    one = Dispatcher(LLAMA8B).paged_cost(decode(64, 4096)).us
    two = Dispatcher(AttnShape(32, 8, 128, hidden_size=4096, tp=2)).paged_cost(decode(64, 4096)).us
    assert two == pytest.approx(one / 2)


def test_step_level_overhead_keeps_small_gains_paged() -> None:
    pts = (CalibrationPoint(8, 2048, 1, cascade_us=40.0, paged_us=60.0),
           CalibrationPoint(256, 16384, 1, cascade_us=200.0, paged_us=2400.0))
    table = CalibrationTable(pts, {"cascade_overhead_us": 50.0})
    d = Dispatcher(LLAMA8B, table=table)
    small = [decode(8, 2048), decode(8, 2048)]  # 2 x 20 us of gain < 50 us of launches
    assert [c.backend for c in d.choose_all(small)] == [Backend.PAGED, Backend.PAGED]
    mixed = small + [decode(256, 16384)]  # the big group pays for the launches
    assert [c.backend for c in d.choose_all(mixed)] == [Backend.CASCADE] * 3
    no_overhead = Dispatcher(LLAMA8B, table=CalibrationTable(pts))
    assert {c.backend for c in no_overhead.choose_all(small)} == {Backend.CASCADE}
