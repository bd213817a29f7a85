"""RegistryState (the platform's desired prefixes) and the reconcile plan; pure Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from granikv_engine.prefix_registry import PrefixAccessDenied, PrefixConflict, PrefixNotFound
from granikv_platform.registry import PrefixSpec, RegistryState, variant_id
from granikv_platform.sync import plan


def spec(pid: str, team: str = "red", toks: tuple[int, ...] = (1, 2, 3), **kw: object
         ) -> PrefixSpec:
    return PrefixSpec(pid, team, toks, **kw)  # type: ignore[arg-type]


def record(s: PrefixSpec, pinned: bool | None = None) -> dict[str, object]:
    return {"prefix_id": s.prefix_id, "team": s.team, "content_hash": s.content_hash,
            "pinned": s.pin if pinned is None else pinned, "state": "ready"}


def test_put_is_idempotent_and_scoped() -> None:
    st = RegistryState()
    stored, created = st.put(spec("a"))
    assert created and stored.token_ids == (1, 2, 3)
    v = st.version
    _, created = st.put(spec("a"))
    assert not created and st.version == v  # same tokens, same pin: nothing changed
    _, created = st.put(spec("a", pin=False))
    assert not created and st.version == v + 1 and not st.get("a", "red").pin
    with pytest.raises(PrefixConflict, match="holds other tokens"):
        st.put(spec("a", toks=(9,)))
    with pytest.raises(PrefixAccessDenied):
        st.put(spec("a", team="blue"))
    with pytest.raises(PrefixAccessDenied):
        st.get("a", "blue")
    with pytest.raises(PrefixAccessDenied):
        st.delete("a", "blue")
    with pytest.raises(PrefixNotFound):
        st.get("zzz", "red")
    assert [s.prefix_id for s in st.list_specs("red")] == ["a"] and st.list_specs("blue") == []
    st.delete("a", "red")
    with pytest.raises(PrefixNotFound):
        st.get("a", "red")


def test_context_replacement_and_snapshot() -> None:
    st = RegistryState()
    assert st.set_context(spec("red-ctx-1", kind="context", text="one")) is None
    assert st.set_context(spec("red-ctx-2", toks=(4, 5), kind="context", text="two")) == \
        "red-ctx-1"
    ctx = st.context("red")
    assert ctx is not None and ctx.text == "two" and "red-ctx-1" not in st.specs
    v, specs = st.snapshot(-1)
    assert v == st.version and specs is not None and [s.prefix_id for s in specs] == ["red-ctx-2"]
    assert st.snapshot(v) == (v, None)
    st.delete("red-ctx-2", "red")
    assert st.context("red") is None


def test_a_contexts_variants_go_with_it() -> None:
    """A variant (the context after what tools put before it) is dropped when its
    context is replaced or deleted; another team's and another context's stay."""
    st = RegistryState()
    st.set_context(spec("red-ctx-1", kind="context", text="one"))
    st.set_context(spec("blue-ctx-1", team="blue", kind="context", text="b"))
    v1 = variant_id("red-ctx-1", (7, 1, 2, 3))
    assert v1.startswith("red-ctx-1:") and v1 != variant_id("red-ctx-1", (8, 1, 2, 3))
    assert v1 == variant_id("red-ctx-1", (7, 1, 2, 3))
    st.put(spec(v1, toks=(7, 1, 2, 3), kind="variant"))
    vb = variant_id("blue-ctx-1", (7, 1))
    st.put(spec(vb, team="blue", toks=(7, 1), kind="variant"))
    st.put(spec("red-ctx-1:x", toks=(5,), kind="prefix"))  # not a variant: a lookalike
    st.set_context(spec("red-ctx-2", toks=(4, 5), kind="context", text="two"))
    assert v1 not in st.specs and vb in st.specs and "red-ctx-1:x" in st.specs
    v2 = variant_id("red-ctx-2", (7, 4, 5))
    st.put(spec(v2, toks=(7, 4, 5), kind="variant"))
    st.delete("red-ctx-2", "red")
    assert v2 not in st.specs and st.context("red") is None


def test_state_survives_a_restart_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    st = RegistryState(path)
    st.put(spec("a"))
    st.set_context(spec("red-ctx", toks=(7, 8), kind="context", text="ctx"))
    again = RegistryState(path)
    assert again.version == st.version and again.specs == st.specs
    assert again.context("red") == st.context("red")


def test_plan_registers_missing_removes_stale_and_fixes_pins() -> None:
    keep, new, changed, pin = spec("keep"), spec("new"), spec("chg", toks=(5,)), spec("pin")
    engine = [record(keep), record(spec("chg", toks=(6,))), record(spec("gone")),
              record(pin, pinned=False)]
    p = plan([keep, new, changed, pin], engine)
    assert {s.prefix_id for s in p.register} == {"new", "chg"}
    assert set(p.unregister) == {("chg", "red"), ("gone", "red")}
    assert [s.prefix_id for s in p.pins] == ["pin"]
    assert plan([keep], [record(keep)]).empty
    moved = spec("keep", team="blue")  # same id, other team: re-register
    assert plan([moved], [record(keep)]).unregister == (("keep", "red"),)
