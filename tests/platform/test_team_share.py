"""Each team's share of a replica (team_share.py), without a cluster: caps, per-team FIFO
queues, refusals, and the share given back however a request ends (answered, failed,
cancelled while waiting or just after its grant, a stream closed unread)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from granikv_platform.config import PlatformConfig
from granikv_platform.errors import error_response
from granikv_platform.protocol import error_item
from granikv_platform.team_share import (
    ShareFull,
    ShareLimits,
    ShareTooLarge,
    TeamShare,
    sequences,
    share_limits,
)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize(("body", "expected"), [
    ({}, 1), ({"n": 4}, 4), ({"n": 2, "best_of": 3}, 3), ({"best_of": 4}, 4),
    ({"n": True}, 1), ({"n": None}, 1), ({"prompt": "a", "n": 2}, 2),
    ({"prompt": [1, 2, 3], "n": 2}, 2), ({"prompt": ["a", "b", "c"], "n": 2}, 6),
    ({"prompt": [[1, 2], [3]]}, 2), ({"prompt": []}, 1)])
def test_sequences_count_choices_for_every_prompt(body: dict[str, Any], expected: int) -> None:
    assert sequences(body) == expected


def test_a_team_at_its_cap_waits_and_another_team_does_not() -> None:
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=4, max_queued=2))
        await share.acquire("red", 4)
        waiting = asyncio.ensure_future(share.acquire("red", 1))
        await settle()
        assert not waiting.done()
        assert share.load("red") == (4, 1)
        await asyncio.wait_for(share.acquire("blue", 4), 0.1)  # blue is not behind red
        assert share.snapshot() == {"blue": {"sequences": 4, "queued": 0},
                                    "red": {"sequences": 4, "queued": 1}}
        share.release("red", 2)
        await asyncio.wait_for(waiting, 0.1)
        assert share.load("red") == (3, 0)

    run(main())


def test_a_team_queue_is_fifo_without_overtaking() -> None:
    """A big request at the head is not overtaken by smaller ones of its team behind it."""
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=4, max_queued=8))
        await share.acquire("red", 3)
        order: list[str] = []

        async def wait(name: str, asked: int) -> None:
            await share.acquire("red", asked)
            order.append(name)

        tasks = [asyncio.ensure_future(wait(n, k)) for n, k in (("a", 4), ("b", 1),
                                                                 ("c", 1))]
        await settle()
        assert order == []  # b would fit (3 + 1), but a is first
        share.release("red", 3)
        await settle()
        assert order == ["a"]
        share.release("red", 4)
        await asyncio.wait_for(asyncio.gather(*tasks), 0.1)
        assert order == ["a", "b", "c"]
        assert share.load("red") == (2, 0)

    run(main())


def test_over_the_queue_bound_is_refused_at_once() -> None:
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=2, max_queued=2))
        await share.acquire("red", 2)
        queued = [asyncio.ensure_future(share.acquire("red", 1)) for _ in range(2)]
        await settle()
        with pytest.raises(ShareFull, match=r"limits.team_max_sequences.*"
                           r"limits.team_max_queued"):
            await asyncio.wait_for(share.acquire("red", 1), 0.1)
        assert share.refused == 1 and share.load("red") == (2, 2)
        with pytest.raises(ShareTooLarge, match=r"asks for 3 sequences"):
            await share.acquire("blue", 3)  # larger than a whole share: never admitted
        for task in queued:
            task.cancel()
        await asyncio.gather(*queued, return_exceptions=True)

    run(main())


def test_no_queue_refuses_whatever_does_not_fit() -> None:
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=1, max_queued=0))
        await share.acquire("red", 1)
        with pytest.raises(ShareFull):
            await share.acquire("red", 1)

    run(main())


def test_a_cancelled_waiter_leaves_the_queue_and_lets_the_next_in() -> None:
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=4, max_queued=4))
        await share.acquire("red", 2)
        big = asyncio.ensure_future(share.acquire("red", 4))  # waits for all 4
        small = asyncio.ensure_future(share.acquire("red", 2))  # fits, but behind big
        await settle()
        assert share.load("red") == (2, 2)
        big.cancel()  # its client went away
        await asyncio.wait_for(small, 0.1)
        assert share.load("red") == (4, 0)
        share.release("red", 2)
        share.release("red", 2)
        assert share.snapshot() == {}

    run(main())


def test_a_waiter_cancelled_after_its_grant_gives_it_back() -> None:
    """The grant and the cancel in the same loop turn: the sequences are not lost."""
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=2, max_queued=4))
        await share.acquire("red", 2)
        waiter = asyncio.ensure_future(share.acquire("red", 2))
        await settle()
        share.release("red", 2)  # grants the waiter ...
        waiter.cancel()  # ... which is cancelled before it resumes
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert share.snapshot() == {}

    run(main())


def test_a_cancelled_waiter_is_skipped_by_a_release_before_it_resumes() -> None:
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=2, max_queued=4))
        await share.acquire("red", 2)
        first = asyncio.ensure_future(share.acquire("red", 2))
        second = asyncio.ensure_future(share.acquire("red", 2))
        await settle()
        first.cancel()  # its future is cancelled now, its task resumes later
        share.release("red", 2)
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(second, 0.1)
        assert share.load("red") == (2, 0)

    run(main())


def test_hold_gives_the_share_back_on_success_and_on_error() -> None:
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=2, max_queued=0))
        async with share.hold("red", 2):
            assert share.load("red") == (2, 0)
        assert share.snapshot() == {}
        with pytest.raises(RuntimeError):
            async with share.hold("red", 2):
                raise RuntimeError("the engine failed")
        assert share.snapshot() == {}

    run(main())


def test_a_stream_holds_its_share_until_it_ends_read_or_not() -> None:
    """As the replica serves a stream: the share is held while the generator lives
    (suspended at a chunk its client has not read), and given back when it is closed."""
    async def main() -> None:
        share = TeamShare(ShareLimits(max_sequences=2, max_queued=0))

        async def stream() -> AsyncGenerator[str, None]:
            async with share.hold("red", 2):
                for i in range(100):
                    yield f"chunk {i}"

        unread = stream()
        assert await anext(unread) == "chunk 0"
        await settle()
        assert share.load("red") == (2, 0)
        with pytest.raises(ShareFull):
            await share.acquire("red", 1)
        await unread.aclose()  # the client went away
        assert share.snapshot() == {}
        assert [c async for c in stream()][-1] == "chunk 99"  # read to its end
        assert share.snapshot() == {}

    run(main())


def test_limits_from_the_config() -> None:
    cfg = PlatformConfig.model_validate({
        "model": {"model_id": "m", "source": "deploy/models/tiny-llama"},
        "limits": {"team_max_queued": 5},
        "teams": [{"name": "red", "max_sequences": 3}, {"name": "blue", "max_queued": 0},
                  {"name": "gold"}]})
    default, per_team = share_limits(cfg, max_num_seqs=32)
    assert default == ShareLimits(16, 5)  # half the engine's batch
    assert per_team == {"red": ShareLimits(3, 5), "blue": ShareLimits(16, 0)}
    cfg = cfg.model_copy(update={"limits": cfg.limits.model_copy(
        update={"team_max_sequences": 4})})
    assert share_limits(cfg, 32)[0] == ShareLimits(4, 5)
    assert share_limits(cfg.model_copy(update={"limits": cfg.limits.model_copy(
        update={"team_max_sequences": None})}), 1)[0].max_sequences == 1


def test_a_refusal_is_a_429_with_retry_after() -> None:
    response = error_response(error_item(429, str(ShareFull("red", ShareLimits(2, 0)))))
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    err = json.loads(bytes(response.body))["error"]
    assert err["type"] == "RateLimitError" and err["code"] == 429
    assert "limits.team_max_sequences" in err["message"]
