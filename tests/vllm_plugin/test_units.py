"""Plugin pieces without starting an engine."""

from __future__ import annotations

from typing import Any

import pytest

from granikv_engine.vllm_plugin.request_args import GraniKVArgs


def test_request_args_nested_and_flat_agree() -> None:
    a = GraniKVArgs.from_extra_args({"granikv": {"team": "red", "prefix_id": "p",
                                                 "register": True}})
    b = GraniKVArgs.from_extra_args({"granikv_team": "red", "granikv_prefix_id": "p",
                                     "granikv_register": 1})
    assert a == b == GraniKVArgs("red", "p", True, True)
    assert GraniKVArgs.from_extra_args(a.to_extra_args()) == a  # type: ignore[union-attr]
    assert GraniKVArgs.from_extra_args(a.to_vllm_xargs()) == a  # type: ignore[union-attr]
    assert GraniKVArgs.from_extra_args({"other": 1}) is None
    assert GraniKVArgs.from_extra_args(None) is None


@pytest.mark.parametrize("bad", [{"granikv": "x"}, {"granikv_team": ""},
                                 {"granikv_colour": "red"}, {"granikv_register": "maybe"},
                                 {"granikv": {"prefix_id": 7}}])
def test_request_args_reject_malformed(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        GraniKVArgs.from_extra_args(bad)


def _config(**kw: Any) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    from tests.vllm_plugin.conftest import MODEL

    return EngineArgs(model=MODEL, load_format="dummy", skip_tokenizer_init=True,
                      enforce_eager=True, max_model_len=512, dtype="float32",
                      **kw).create_engine_config()


def test_enabling_sets_block_size_scheduler_and_extension() -> None:
    cfg = _config(additional_config={"granikv": {"enabled": True}}, block_size=32)
    assert cfg.cache_config.block_size == 1
    assert cfg.cache_config.enable_prefix_caching
    assert cfg.scheduler_config.scheduler_cls.endswith("GraniKVScheduler")
    assert cfg.parallel_config.worker_extension_cls.endswith("GraniKVWorkerExtension")
    assert cfg.model_config.disable_cascade_attn


def test_disabled_leaves_the_config_stock() -> None:
    on = {"granikv": {"enabled": False, "hot_slots": 10}}
    for cfg in (_config(), _config(additional_config=on)):
        assert cfg.cache_config.block_size != 1
        assert cfg.scheduler_config.scheduler_cls in (None, "")
        assert not cfg.parallel_config.worker_extension_cls


def test_unknown_settings_are_rejected() -> None:
    with pytest.raises(Exception, match="unknown granikv settings"):
        _config(additional_config={"granikv": {"enabled": True, "hot_slotz": 4}})


def test_seeded_hashes_equal_stock_hashes() -> None:
    """A hit request's seeded chain is exactly what vLLM's own hasher computes."""
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    from granikv_engine.vllm_plugin.core.hasher import Seed, SeededBlockHasher, SeedTable

    init_none_hash(sha256)
    stock = get_request_block_hasher(1, sha256)
    prefix = list(range(10, 74))
    fill = Request("fill", prefix, SamplingParams(max_tokens=1), None, block_hasher=stock)
    seeded = SeededBlockHasher(stock, default_team="t", prompt_match=True)
    seeded.publish(SeedTable.build([Seed("p", "t", prefix, list(fill.block_hashes))]))
    prompt = prefix + [5, 6, 7]
    for extra in ({"granikv": {"team": "t", "prefix_id": "p"}}, {"granikv": {"team": "t"}}):
        ref = Request("a", prompt, SamplingParams(max_tokens=1, extra_args=extra), None,
                      block_hasher=stock)
        got = Request("b", prompt, SamplingParams(max_tokens=1, extra_args=extra), None,
                      block_hasher=seeded)
        assert got.block_hashes == ref.block_hashes and len(got.block_hashes) == 67
    assert seeded.seeded_tokens == 2 * 64
    other = Request("c", [9] + prompt[1:], SamplingParams(max_tokens=1), None,
                    block_hasher=seeded)  # does not start with the prefix: not seeded
    assert seeded.seeded_tokens == 2 * 64 and len(other.block_hashes) == 67


def test_the_runner_hook_gives_builders_their_host_block_table() -> None:
    """After the runner's KV cache is initialised (the plugin's hook), every GraniKV
    builder of the runner reads its group's host block table; other builders are left
    alone. Nothing walks the call stack: a builder the hook never saw stays unbound."""
    from types import SimpleNamespace

    import torch

    from granikv_engine.vllm_plugin.worker.metadata_builder import GraniKVMetadataBuilder
    from granikv_engine.vllm_plugin.worker.runner_binding import bind_host_block_tables

    ours = [object.__new__(GraniKVMetadataBuilder) for _ in range(2)]
    stranger = object.__new__(GraniKVMetadataBuilder)
    for b in (*ours, stranger):
        b.host_block_table = None
    tables = [torch.arange(12, dtype=torch.int32).view(3, 4) + 100 * g for g in range(2)]
    other = SimpleNamespace(host_block_table=None)  # another backend's builder

    class Runner:  # what the hook reads of vLLM's model runner (weakly referenced)
        def __init__(self) -> None:
            self.attn_groups = [[SimpleNamespace(metadata_builders=[ours[0], other])],
                                [SimpleNamespace(metadata_builders=[ours[1]])]]
            self.input_batch = SimpleNamespace(block_table=SimpleNamespace(block_tables=[
                SimpleNamespace(get_cpu_tensor=lambda t=t: t) for t in tables]))

    runner = Runner()
    assert bind_host_block_tables(runner) == 2
    assert ours[0].host_block_table is not None and ours[0].host_block_table() is tables[0]
    assert ours[1].host_block_table is not None and ours[1].host_block_table() is tables[1]
    assert other.host_block_table is None and stranger.host_block_table is None


@pytest.mark.parametrize("rank", [0, 1])
def test_dispatch_table_comes_from_rank_0_only(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                               rank: int) -> None:
    """Tensor parallelism: only rank 0 reads the calibration file; every rank takes part
    in the broadcast and uses what it returns (a rank that read the file on its own
    could skip the broadcast rank 0 waits in, or use another table)."""
    from types import SimpleNamespace

    import torch

    from granikv_engine.config import GraniKVConfig
    from granikv_engine.dispatcher import CalibrationPoint, CalibrationTable
    from granikv_engine.vllm_plugin.worker import dispatch_table as tables
    from granikv_engine.vllm_plugin.worker.kernels import calibrate

    on_disk = CalibrationTable((CalibrationPoint(8, 1024, 1, 10.0, 20.0),), {"src": "file"})
    path = tmp_path / "cal.json"
    path.write_text(on_disk.to_json())
    from_rank0 = CalibrationTable((CalibrationPoint(64, 4096, 1, 1.0, 2.0),), {"src": "r0"})
    sent: list[CalibrationTable | None] = []

    def fake_broadcast(table: CalibrationTable | None) -> CalibrationTable | None:
        sent.append(table)
        return table if rank == 0 else from_rank0

    monkeypatch.setattr(tables, "_TABLES", {})
    monkeypatch.setattr(tables, "_tp_rank", lambda: rank)
    monkeypatch.setattr(calibrate, "broadcast", fake_broadcast)
    cfg = GraniKVConfig(enabled=True, calibration_path=str(path))
    vcfg = SimpleNamespace(model_config=SimpleNamespace(get_num_attention_heads=lambda p: 32),
                           parallel_config=None)
    spec = SimpleNamespace(num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    got = tables.dispatch_table(vcfg, spec, torch.device("cpu"), cfg)  # type: ignore[arg-type]
    assert len(sent) == 1  # every rank broadcasts, once
    if rank == 0:
        assert sent[0] is not None and sent[0].meta["src"] == "file"
        assert got is not None and got.meta["src"] == "file"
    else:
        assert sent[0] is None  # rank 1 did not read the file
        assert got is from_rank0
    tables.dispatch_table(vcfg, spec, torch.device("cpu"), cfg)  # type: ignore[arg-type]
    assert len(sent) == 1  # cached per process and shape


def test_fa3_is_called_with_vllm_026s_positional_arguments() -> None:
    """CudaOps names what GraniKV sets of FA3's 37 positional arguments; both passes must
    reach torch.ops._vllm_fa3_C.fwd exactly as vLLM 0.26 orders them (the kernel runs
    only on a GPU: here a recorder stands in for the op)."""
    from types import SimpleNamespace

    import torch

    from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

    calls: list[tuple[Any, ...]] = []

    def fwd(*args: Any) -> tuple[Any, ...]:
        calls.append(args)
        return "o", "lse", None, None

    ops = object.__new__(CudaOps)
    ops._fwd = fwd
    ops._merge = lambda *a: calls.append(("merge", *a))
    t = {name: torch.zeros(1) for name in ("q", "k", "v", "out", "qsl", "lens", "bt",
                                           "meta", "cu_q", "cu_k", "used", "dmeta")}
    dense = SimpleNamespace(identity=True, gather=None, cu_q=t["cu_q"], cu_k=t["cu_k"],
                            seqused_k=t["used"], max_q=3, max_k=4, num_splits=5,
                            scheduler_metadata=t["dmeta"])
    plan = SimpleNamespace(query_start_loc=t["qsl"], kv_seq_lens=t["lens"], max_q=1,
                           max_kv=2, block_table=t["bt"], scheduler_metadata=t["meta"],
                           num_splits=7, cascade_dev=dense)
    ops.forward(t["q"], t["k"], t["v"], plan, 0.5, t["out"])  # type: ignore[arg-type]
    paged, hot, merge = calls
    assert len(paged) == len(hot) == 37
    n = None
    assert paged[3:] == (n, n, n, t["out"], t["qsl"], n, n, n, t["lens"], 1, 2, t["bt"],
                         n, n, n, n, n, n, n, n, 0.5, True, -1, -1, 0.0, True, t["meta"],
                         7, n, 0, n, 1, 0, n)
    assert hot[:3] == (t["q"], t["k"], t["v"])  # the dense pass reads the flat slabs
    assert hot[3:] == (n, n, n, n, t["cu_q"], t["cu_k"], n, n, t["used"], 3, 4, n,
                       n, n, n, n, n, n, n, n, 0.5, False, -1, -1, 0.0, True, t["dmeta"],
                       5, n, 0, n, 1, 0, n)
    assert merge == ("merge", t["out"], "o", "lse", t["out"], "lse")
