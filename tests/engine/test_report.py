"""bench/report.py's end-to-end tables: each engine at its best max_num_seqs."""

from __future__ import annotations

from typing import Any

from granikv_engine.bench.report import dispatch_table, e2e_table, seqs_table, step_table


def _result(engine: str, workload: str, tok_s: float, seqs: int | None) -> dict[str, Any]:
    r: dict[str, Any] = {
        "engine": engine, "workload": workload, "tok_s": tok_s, "wall_s": 1e5 / tok_s,
        "ttft_s": {"p50": 0.5}, "itl_s": {"p50": 0.02}, "scheduler": {"steps": 2000},
        "dispatch": {"groups": {"cascade": 3, "paged": 1}, "rows": {"cascade": 500}}}
    if seqs is not None:  # None: older JSON, without the key (512)
        r["max_num_seqs"] = seqs
    return r


def _rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]


# W2 at 256 (one run per engine) and at 512 (another, older JSON for stock): stock is
# faster at 256, GraniKV at 512. W1 only at 256.
RUNS = [
    {"results": [_result("stock", "W1", 6000, 256), _result("stock", "W2", 5000, 256),
                 _result("granikv", "W1", 15000, 256), _result("granikv", "W2", 11000, 256)]},
    {"results": [_result("stock", "W2", 4000, None)]},
    {"results": [_result("granikv", "W2", 13000, 512)]},
]


def test_each_engine_keeps_its_fastest_max_num_seqs() -> None:
    table, speed = e2e_table(RUNS)
    rows = {r[0].split()[0]: r for r in _rows(table)}
    w2 = rows["W2"]
    assert w2[0] == "W2 (max_num_seqs: stock 256, GraniKV 512)"
    assert (w2[1], w2[2], w2[3]) == ("5,000", "13,000", "**2.60x**")
    assert speed["W2"] == {"stock": 5000, "granikv": 13000}
    w1 = rows["W1"]  # one max_num_seqs only: no label
    assert w1[0] == "W1" and w1[3] == "**2.50x**"


def test_seqs_table_lists_every_run_of_a_workload_with_a_choice() -> None:
    rows = _rows(seqs_table(RUNS))
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("W2", "granikv", "256", "11,000"), ("W2", "granikv", "512", "13,000"),
        ("W2", "stock", "256", "5,000"), ("W2", "stock", "512", "4,000")]
    assert rows[0][4:] == ["20.0", "2000"]
    assert seqs_table(RUNS[:1]) == ""  # every workload at one max_num_seqs: no table
    table, _ = e2e_table(RUNS[:1])
    assert "max_num_seqs" not in table


def test_step_table_names_each_run_s_max_num_seqs() -> None:
    rows = _rows(step_table(RUNS))
    assert [(r[0], r[1], r[2]) for r in rows[-2:]] == [("stock", "W2", "512"),
                                                       ("granikv", "W2", "512")]
    assert rows[0][:3] == ["stock", "W1", "256"] and len(rows[0]) == 10


def _turn(tok_s: float, ttft: float, cap: float | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"tok_s": tok_s, "ttft_s": {"p50": ttft, "p90": 2 * ttft}}
    if cap is not None:
        t["ceiling"] = {"tok_s": cap}
    return t


def _noctx(workload: str, tok_s: float, cap: float, turns: list[Any] | None = None
           ) -> dict[str, Any]:
    r = _result("stock-noctx", workload, tok_s, 256)
    r["ceiling"] = {"tok_s": cap, "wall_s": 40.0, "no_context_wall_s": 30.0,
                    "prefill_s": 4.0, "decode_s": 6.0, "passes": 1234}
    if turns:
        r["turns"] = turns
    return r


# W6 with a measured ceiling of 6,000 tok/s; W7 two turns; W1 with its prior estimate.
AGENTS = [{"results": [
    _result("stock", "W6", 2000, 256), _noctx("W6", 8000, 6000),
    _result("granikv", "W6", 5400, 256),
    {**_result("stock", "W7", 1000, 256), "turns": [_turn(900, 1.0), _turn(1100, 2.0)]},
    _noctx("W7", 5000, 4000, [_turn(4500, 0.1, 3800), _turn(5500, 0.1, 4200)]),
    {**_result("granikv", "W7", 3000, 256), "turns": [_turn(2700, 0.5), _turn(3150, 0.25)]},
    _result("stock", "W1", 2000, 256), _result("granikv", "W1", 5320, 256)]}]


def test_the_tables_give_each_workload_its_ceiling_and_share_of_it() -> None:
    from granikv_engine.bench.report import ceiling_table, turns_table

    rows = {r[0]: r for r in _rows(e2e_table(AGENTS)[0])}
    assert rows["W6"][3:7] == ["**2.70x**", "85% of ceiling", "3.00x (measured)", "90%"]
    assert rows["W7"][5:7] == ["4.00x (measured)", "75%"]
    assert rows["W1"][3:7] == ["**2.66x**", "2.7x", "2.95x", "90%"]  # the prior estimate
    table = ceiling_table(AGENTS)
    assert "cut to 16 tokens" in table and "bench/ceiling.py" in table
    cap = {r[0]: r for r in _rows("\n".join(table.splitlines()[2:]))}
    assert cap["W6"] == ["W6", "8,000, 12.50", "4.00", "1,234, 6.00", "6,000 (40.00)",
                         "3.00x", "5,400", "90%", "85%"]
    assert "W1" not in cap
    turns = _rows(turns_table(AGENTS))
    assert turns == [
        ["W7", "1", "900", "2,700", "3.00x", "3,800", "71%", "1.00 / 2.00", "0.50 / 1.00"],
        ["W7", "2", "1,100", "3,150", "2.86x", "4,200", "75%", "2.00 / 4.00", "0.25 / 0.50"]]


def test_dispatch_table_shows_choices_by_group_size_and_steps_by_kind() -> None:
    assert dispatch_table(RUNS) == ""  # no run counted group sizes
    r = _result("granikv", "W6", 9000, 256)
    r["dispatch"].update(group_sizes={"256/cascade": 40, "4/paged": 7, "4/cascade": 2},
                         step_kinds={"decode/full": 90, "mixed/piecewise": 10})
    (row,) = _rows(dispatch_table([{"results": [r, _result("stock", "W6", 4000, 256)]}]))
    assert row == ["granikv", "W6", "90 / 0 / 0 / 10", "4: 2 / 7, 256: 40 / 0"]
