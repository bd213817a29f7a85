"""A header section over its limits is refused by the HTTP server while it arrives
(``header_limits.py``): 431, OpenAI-shaped, ``Connection: close``, the rest unread, the
server's memory flat and its other clients answered meanwhile.

The server is Serve's own: Ray's ``start_asgi_http_server`` (uvicorn, ``http="auto"``,
with the proxy callback of ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``), in a
subprocess so that its memory is its own; and uvicorn's h11 protocol, which ``auto``
picks where httptools is missing. Raw sockets, on a free loopback port.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil
import pytest

from granikv_platform.front import CALLBACK, PROXY_CALLBACK_ENV
from tests.conftest import REPO, free_port

SERVER = """
import asyncio, json, sys
from ray.serve._private.http_util import (
    configure_http_middlewares, configure_http_options_with_defaults,
    start_asgi_http_server)
from ray.serve.config import HTTPOptions

async def app(scope, receive, send):
    while (await receive()).get("more_body"):
        pass
    headers = dict(scope["headers"])
    body = json.dumps({"fields": len(scope["headers"]),
                       "request_id": headers.get(b"x-request-id", b"").decode()}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

async def main(mode, port):
    if mode == "h11":
        import uvicorn
        from granikv_platform.front import proxy_middlewares
        proxy_middlewares()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http="h11",
                                               lifespan="off", log_config=None))
        server.install_signal_handlers = lambda: None
        task = asyncio.create_task(server.serve())
    else:
        options = configure_http_middlewares(configure_http_options_with_defaults(
            HTTPOptions(host="127.0.0.1", port=port)))
        task, server = await start_asgi_http_server(app, options,
                                                    event_loop=asyncio.get_running_loop())
    while not server.started:
        await asyncio.sleep(0.02)
    print("READY", flush=True)
    await task

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""
MB = 1 << 20


@dataclass
class Server:
    port: int
    process: psutil.Process

    def rss_mb(self) -> float:
        return self.process.memory_info().rss / MB


def start(mode: str, **env: str) -> Iterator[Server]:
    port = free_port()
    environ = {**os.environ, PROXY_CALLBACK_ENV: CALLBACK, **env}
    proc = subprocess.Popen([sys.executable, "-c", SERVER, mode, str(port)], cwd=REPO,
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "READY":
                break
        assert proc.poll() is None, "".join(lines)
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield Server(port, psutil.Process(proc.pid))
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module", params=["serve", "h11"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    yield from start(request.param)


def request(port: int, head: bytes, timeout: float = 10) -> bytes:
    """Send ``head`` (a request line and headers) and the blank line; the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head + b"\r\n")
        return read_all(s)


def read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
        if b"\r\n\r\n" in out and b"connection: close" not in out.lower():
            head, _, body = out.partition(b"\r\n\r\n")
            size = int(_header(head, b"content-length") or 0)
            if len(body) >= size:
                break
    return out


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip()
    return None


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def refused(answer: bytes, limit: str, close: bool = True) -> dict[str, object]:
    """The 431's error, checked: OpenAI-shaped, naming ``limit``, one request id, and
    ``Connection: close`` (``close``; a proxy in front drops it: hop by hop)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    assert status(answer) == 431, answer[:300]
    assert not close or _header(head, b"connection") == b"close", head
    error: dict[str, object] = json.loads(body)["error"]
    assert error["code"] == 431 and error["type"] == "RequestHeaderFieldsTooLargeError"
    assert limit in str(error["message"]), error
    assert error["request_id"] == (_header(head, b"x-request-id") or b"").decode()
    return error


GET = b"GET /v1/models HTTP/1.1\r\nhost: x\r\n"


def test_a_normal_request_is_served(server: Server) -> None:
    answer = request(server.port, GET + b"x-request-id: plain-1\r\n")
    assert status(answer) == 200
    assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {"fields": 2,
                                                            "request_id": "plain-1"}


@dataclass
class Flood:
    answer: bytes  # the server's whole answer
    answered_s: float  # from the first byte sent to the answer's head read
    sent_mb: float  # what the client had sent by then
    total_mb: float = 0.0  # what it sent in all (``keep_sending``: what the server took)
    total_s: float = 0.0


def flood(port: int, megabytes: int, head: bytes = GET, keep_sending: bool = False) -> Flood:
    """Stream ``head`` and then one header's value of ``megabytes`` MB, in 64 KiB chunks,
    reading meanwhile; stop once the head of an answer came (``keep_sending``: once all
    is sent or the server closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        t0 = time.monotonic()
        s.sendall(head + b"x-big: ")
        chunk, sent, answer = b"a" * (64 * 1024), 0, b""
        answered: tuple[float, float] | None = None
        s.setblocking(False)
        while sent < megabytes * MB and (keep_sending or answered is None):
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                time.sleep(0.001)
            except OSError:
                break  # closed by the server after its answer
            with contextlib.suppress(BlockingIOError, ConnectionError):
                answer += s.recv(65536)
            if answered is None and b"\r\n\r\n" in answer:
                answered = time.monotonic() - t0, sent / MB
        total = time.monotonic() - t0, sent / MB
        s.settimeout(5)
        with contextlib.suppress(ConnectionError):
            answer += read_all(s)
        at, mb = answered or total
        return Flood(answer, at, mb, total[1], total[0])


def test_100_mb_of_header_is_refused_at_once_with_memory_flat(server: Server) -> None:
    rss_before = server.rss_mb()
    flooded: list[Flood] = []
    latencies = other_client_during(lambda: flooded.append(flood(server.port, 100)),
                                    server.port)
    rss_after, (f,) = server.rss_mb(), flooded
    print(f"\n{f.sent_mb:.1f} MB sent, 431 after {f.answered_s:.3f} s, RSS "
          f"{rss_before:.1f} -> {rss_after:.1f} MB, other client max {max(latencies):.3f} s "
          f"over {len(latencies)}")
    refused(f.answer, "GRANIKV_MAX_HEADER_BYTES")
    assert f.answered_s < 2.0 and f.sent_mb < 100, f
    assert rss_after - rss_before < 8, (rss_before, rss_after)
    assert max(latencies) < 1.0, latencies
    assert status(request(server.port, GET)) == 200


def other_client_during(work: Callable[[], None], port: int) -> list[float]:
    """Run ``work`` while another client sends plain requests, one after another, from
    before it starts until it ends; their latencies (at least three)."""
    done, latencies = threading.Event(), list[float]()

    def other() -> None:
        while not done.is_set() or len(latencies) < 3:
            t0 = time.monotonic()
            assert status(request(port, GET)) == 200
            latencies.append(time.monotonic() - t0)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        work()
    finally:
        done.set()
        thread.join()
    return latencies


def test_2000_headers_are_refused(server: Server) -> None:
    fields = b"".join(b"x-%d: v\r\n" % i for i in range(2000))
    refused(request(server.port, GET + fields), "GRANIKV_MAX_HEADERS")
    fewer = b"".join(b"x-%d: v\r\n" % i for i in range(98))  # with host: 99 fields
    assert status(request(server.port, GET + fewer)) == 200


def test_each_request_of_a_connection_is_counted_from_its_start(server: Server) -> None:
    # Three requests of 40 KiB of header each: 120 KiB on one connection, each under 64.
    big = GET + b"x-pad: " + b"p" * (40 * 1024) + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        for _ in range(3):
            s.sendall(big)
            assert status(read_all(s)) == 200
        s.sendall(GET + b"x-pad: " + b"p" * (70 * 1024) + b"\r\n\r\n")
        refused(read_all(s), "GRANIKV_MAX_HEADER_BYTES")


def test_a_post_body_is_not_counted_as_header(server: Server) -> None:
    body = b"b" * (300 * 1024)
    post = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n"
            % len(body))
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(post + body + GET + b"\r\n")  # the next request pipelined behind
        answers = b""
        while answers.count(b"HTTP/1.1 200") < 2:
            chunk = s.recv(65536)
            assert chunk, answers
            answers += chunk


@pytest.mark.parametrize("mode", ["serve", "h11"])
def test_the_limits_come_from_the_environment(mode: str) -> None:
    for srv in start(mode, GRANIKV_MAX_HEADER_BYTES="2048", GRANIKV_MAX_HEADERS="5"):
        assert status(request(srv.port, GET + b"x-a: " + b"a" * 1800 + b"\r\n")) == 200
        error = refused(request(srv.port, GET + b"x-a: " + b"a" * 2100 + b"\r\n"),
                        "GRANIKV_MAX_HEADER_BYTES")
        assert "2048" in str(error["message"])
        four = b"".join(b"x-%d: v\r\n" % i for i in range(4))  # with host: 5 fields
        assert status(request(srv.port, GET + four)) == 200
        error = refused(request(srv.port, GET + four + b"x-9: v\r\n"), "GRANIKV_MAX_HEADERS")
        assert "5 fields" in str(error["message"])


@pytest.mark.parametrize("given", [b"a b", b"<x>", b"a" * 129, b"r\xe9q", b""])
def test_an_odd_request_id_is_replaced_by_one_id_before_serve_reads_it(given: bytes) -> None:
    for srv in start("serve"):  # Ray's own request-id middleware behind the front
        answer = request(srv.port, GET + b"x-request-id: " + given + b"\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        ids = [v.strip() for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n"))
               if k.lower() == b"x-request-id"]
        seen = json.loads(body)["request_id"]  # what the app read
        assert ids == [seen.encode()] and len(seen) == 32, (ids, seen)
