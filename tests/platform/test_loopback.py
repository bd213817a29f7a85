"""A local cluster's workers put the gRPC servers that Ray asks for on every interface
on 127.0.0.1 (``loopback.setup``, Ray's worker-process setup hook): a real gRPC server
bound through Ray's ``add_port_to_grpc_server`` with Serve's ``[::]:0``."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import psutil
import pytest
from ray._common import tls_utils

from granikv_platform import loopback


def listening() -> set[tuple[str, int]]:
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections("inet")
            if c.status == psutil.CONN_LISTEN}


@pytest.fixture
def stock_binding(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ray's own function back in place after the test (setup replaces it)."""
    monkeypatch.setattr(tls_utils, "add_port_to_grpc_server",
                        tls_utils.add_port_to_grpc_server)
    yield


def bound_port(address: str) -> tuple[str, int]:
    server = grpc.server(ThreadPoolExecutor(1))
    before = listening()
    port = tls_utils.add_port_to_grpc_server(server, address)
    server.start()
    try:
        (new,) = listening() - before
        assert new[1] == port
        return new
    finally:
        server.stop(None)


@pytest.mark.parametrize(("given", "bound"), [
    ("[::]:0", "127.0.0.1:0"), ("0.0.0.0:8000", "127.0.0.1:8000"), (":9000", "127.0.0.1:9000"),
    ("10.0.0.5:0", "10.0.0.5:0"), ("[::1]:0", "[::1]:0"), ("localhost:0", "localhost:0")])
def test_every_interface_becomes_loopback_a_named_host_stays(given: str, bound: str) -> None:
    assert loopback.loopback_address(given) == bound


def test_a_replicas_grpc_server_listens_on_loopback(stock_binding: None) -> None:
    assert bound_port("[::]:0")[0] == "::"  # Ray's own: every interface
    loopback.setup()
    loopback.setup()  # once: the second call leaves the first's wrapper
    wrapper = tls_utils.add_port_to_grpc_server
    assert wrapper.__wrapped__.__module__ == tls_utils.__name__  # type: ignore[attr-defined]
    assert bound_port("[::]:0")[0] in ("127.0.0.1", "::ffff:127.0.0.1")  # (a dual-stack socket)
