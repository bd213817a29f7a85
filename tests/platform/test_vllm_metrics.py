"""vLLM's own metrics leave every LLM replica the way Ray Serve LLM exports them: vLLM's
``RayPrometheusStatLogger`` -> ``ray.util.metrics`` -> Ray's metrics agent on the node
(what Prometheus scrapes on a Ray cluster), tagged with the Serve replica's id."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
# vLLM's metric names, as Ray exports them (":" -> "_", a "ray_" prefix).
WANTED = ("ray_vllm_time_to_first_token_seconds", "ray_vllm_inter_token_latency_seconds",
          "ray_vllm_e2e_request_latency_seconds", "ray_vllm_prefix_cache_queries",
          "ray_vllm_prefix_cache_hits", "ray_vllm_kv_cache_usage_perc")


def node_metrics() -> dict[str, set[str]]:
    """family -> the ReplicaId tags it has samples for, from this node's metrics agent."""
    import ray

    port = ray._private.worker.global_worker.node.metrics_export_port
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    return {f.name: {s.labels.get("ReplicaId", "") for s in f.samples}
            for f in text_string_to_metric_families(text) if f.name.startswith("ray_vllm_")}


def test_vllms_metrics_are_exported_from_every_replica(client: Client) -> None:
    red = client("red")
    for i in range(8):  # Serve spreads them over both replicas
        r = red.post("/v1/chat/completions", json={
            "model": "tiny-llama", "max_tokens": 4, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"count to {i}"}]})
        assert r.status_code == 200, r.text
    replicas = set(client("@admin").get("/v1/granikv/stats").json()["replicas"])
    deadline = time.monotonic() + 90  # Ray's agent exports every few seconds
    while True:
        got = node_metrics()
        missing = [n for n in WANTED if not got.get(n)]
        tagged = got.get("ray_vllm_time_to_first_token_seconds", set())
        if not missing and replicas <= tagged:
            break
        assert time.monotonic() < deadline, (missing, replicas, tagged)
        time.sleep(2)
    assert "" not in tagged  # every sample says which replica it came from
