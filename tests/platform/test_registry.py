"""RegistryState (the platform's desired prefixes) and the reconcile plan; pure Python."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from granikv_engine.prefix_registry import PrefixConflict, PrefixNotFound
from granikv_platform.registry import PrefixSpec, RegistryState, display_ids, variant_id
from granikv_platform.sync import plan


def spec(pid: str, team: str = "red", toks: tuple[int, ...] = (1, 2, 3), **kw: object
         ) -> PrefixSpec:
    return PrefixSpec(pid, team, toks, **kw)  # type: ignore[arg-type]


def record(s: PrefixSpec, pinned: bool | None = None) -> dict[str, object]:
    return {"prefix_id": s.prefix_id, "team": s.team, "content_hash": s.content_hash,
            "pinned": s.pin if pinned is None else pinned, "state": "ready"}


def test_put_is_idempotent() -> None:
    st = RegistryState()
    stored, created = st.put(spec("a"))
    assert created and stored.token_ids == (1, 2, 3) and stored.prefix_id == "red/a"
    v = st.version
    _, created = st.put(spec("a"))
    assert not created and st.version == v  # same tokens, same pin: nothing changed
    _, created = st.put(spec("a", pin=False))
    assert not created and st.version == v + 1 and not st.get("a", "red").pin
    with pytest.raises(PrefixConflict, match="prefix id 'a' holds other tokens"):
        st.put(spec("a", toks=(9,)))
    with pytest.raises(PrefixNotFound):
        st.get("zzz", "red")
    assert [s.team_id for s in st.list_specs("red")] == ["a"] and st.list_specs("blue") == []
    st.delete("a", "red")
    with pytest.raises(PrefixNotFound):
        st.get("a", "red")


def test_ids_are_scoped_by_team() -> None:
    """Two teams register the same id, each its own prefix; a team reaches only its
    own, and another team's id is as absent as an unknown one (same error, same
    message), whether named by the team's id or by the scoped one."""
    st = RegistryState()
    red, _ = st.put(spec("doc"))
    blue, created = st.put(spec("doc", team="blue", toks=(7, 8)))
    assert created and (red.prefix_id, blue.prefix_id) == ("red/doc", "blue/doc")
    assert st.get("doc", "red").token_ids == (1, 2, 3)
    assert st.get("doc", "blue").token_ids == (7, 8)
    assert st.get("red/doc", "red") == red  # a scoped id of one's own: the same prefix
    st.put(spec("red-only"))
    errors = []
    for pid in ("red-only", "nothing"):  # another team's, and nobody's
        with pytest.raises(PrefixNotFound) as e:
            st.get(pid, "blue")
        errors.append(str(e.value.args[0]).replace(pid, "ID"))
        with pytest.raises(PrefixNotFound):
            st.delete(pid, "blue")
    assert errors[0] == errors[1] == "no prefix 'ID'"
    with pytest.raises(PrefixNotFound):
        st.get("red/doc", "blue")  # another team's scoped id is in blue's scope: blue/red/doc
    st.delete("doc", "blue")
    assert st.get("doc", "red") == red and {s.prefix_id for s in st.list_specs()} == {
        "red/doc", "red/red-only"}
    assert st.set_context(spec("red-context-1", team="blue", kind="context", text="t")) is None
    ctx = st.context("blue")
    assert st.context("red") is None and ctx is not None and ctx.prefix_id == "blue/red-context-1"


def test_display_ids_show_the_teams_own_ids_unless_two_teams_share_one() -> None:
    shown = display_ids([("red/a", "red"), ("blue/a", "blue"), ("red/b", "red")])
    assert shown == {"red/a": "red/a", "blue/a": "blue/a", "red/b": "b"}


def test_context_replacement_and_snapshot() -> None:
    st = RegistryState()
    assert st.set_context(spec("red-ctx-1", kind="context", text="one")) is None
    assert st.set_context(spec("red-ctx-2", toks=(4, 5), kind="context", text="two")) == \
        "red/red-ctx-1"
    ctx = st.context("red")
    assert ctx is not None and ctx.text == "two" and "red/red-ctx-1" not in st.specs
    v, specs = st.snapshot(-1)
    assert v == st.version and specs is not None and [s.prefix_id for s in specs] == [
        "red/red-ctx-2"]
    assert st.snapshot(v) == (v, None)
    st.delete("red-ctx-2", "red")
    assert st.context("red") is None


def test_a_contexts_variants_go_with_it() -> None:
    """A variant (the context after what tools put before it) is dropped when its
    context is replaced or deleted; another team's and another context's stay."""
    st = RegistryState()
    st.set_context(spec("red-ctx-1", kind="context", text="one"))
    st.set_context(spec("blue-ctx-1", team="blue", kind="context", text="b"))
    v1 = variant_id("red/red-ctx-1", (7, 1, 2, 3))  # of the context's scoped id
    assert v1.startswith("red/red-ctx-1:") and v1 != variant_id("red/red-ctx-1", (8, 1, 2, 3))
    assert v1 == variant_id("red/red-ctx-1", (7, 1, 2, 3))
    st.put(spec(v1, toks=(7, 1, 2, 3), kind="variant"))
    vb = variant_id("blue/blue-ctx-1", (7, 1))
    st.put(spec(vb, team="blue", toks=(7, 1), kind="variant"))
    st.put(spec("red-ctx-1:x", toks=(5,), kind="prefix"))  # not a variant: a lookalike
    st.set_context(spec("red-ctx-2", toks=(4, 5), kind="context", text="two"))
    assert v1 not in st.specs and vb in st.specs and "red/red-ctx-1:x" in st.specs
    v2 = variant_id("red/red-ctx-2", (7, 4, 5))
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


def test_a_file_written_before_ids_were_scoped_loads(tmp_path: Path) -> None:
    """The teams' own ids in an older file are scoped as it loads; the file is written
    again at a new version, so that the replicas reconcile."""
    path = tmp_path / "registry.json"
    old = {"version": 7, "contexts": {"blue": "blue-context-abc"}, "specs": [
        {"prefix_id": "blue-context-abc", "team": "blue", "token_ids": [1, 2], "pin": True,
         "kind": "context", "text": "t", "source": "config", "created_at": 1.0},
        {"prefix_id": "blue-context-abc:0123", "team": "blue", "token_ids": [9, 1, 2],
         "pin": True, "kind": "variant", "text": None, "source": "api", "created_at": 1.0},
        {"prefix_id": "doc", "team": "red", "token_ids": [3], "pin": False, "kind": "prefix",
         "text": None, "source": "api", "created_at": 1.0}]}
    path.write_text(json.dumps(old))
    st = RegistryState(path)
    assert set(st.specs) == {"blue/blue-context-abc", "blue/blue-context-abc:0123", "red/doc"}
    ctx = st.context("blue")
    assert ctx is not None and ctx.team_id == "blue-context-abc" and ctx.text == "t"
    assert st.get("doc", "red").token_ids == (3,) and st.version == 8
    assert json.loads(path.read_text())["contexts"] == {"blue": "blue/blue-context-abc"}
    again = RegistryState(path)
    assert again.version == 8 and again.specs == st.specs
    st.set_context(spec("blue-context-new", team="blue", toks=(4,), kind="context", text="n"))
    assert set(st.specs) == {"blue/blue-context-new", "red/doc"}  # the old variant went too


def test_plan_registers_missing_removes_stale_and_fixes_pins() -> None:
    keep, new, changed, pin = spec("keep"), spec("new"), spec("chg", toks=(5,)), spec("pin")
    engine = [record(keep), record(spec("chg", toks=(6,))), record(spec("gone")),
              record(pin, pinned=False)]
    p = plan([keep, new, changed, pin], engine)
    assert {s.prefix_id for s in p.register} == {"red/new", "red/chg"}
    assert set(p.unregister) == {("red/chg", "red"), ("red/gone", "red")}
    assert [s.prefix_id for s in p.pins] == ["red/pin"]
    assert plan([keep], [record(keep)]).empty
    theirs = spec("keep", team="blue")  # the same id of another team: another prefix
    both = plan([keep, theirs], [record(keep)])
    assert [s.prefix_id for s in both.register] == ["blue/keep"] and not both.unregister
    # an engine that still holds an id from before ids were scoped drops it
    old = {**record(keep), "prefix_id": "keep"}
    assert plan([keep], [old]).unregister == (("keep", "red"),)
