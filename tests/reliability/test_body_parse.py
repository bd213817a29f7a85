"""body.parse: what a malformed body is refused with (no Ray; the HTTP side is
test_fuzz_raw.py)."""

from __future__ import annotations

import json

import pytest

from granikv_platform.body import MAX_DEPTH, BadBody, parse

JSON = "application/json"


@pytest.mark.parametrize(("raw", "ctype", "status", "words"), [
    (b'{"a": 1}', None, 415, "Content-Type: application/json"),
    (b'{"a": 1}', "text/plain", 415, "'text/plain'"),
    (b'{"a": 1}', "application/x-www-form-urlencoded", 415, "application/json"),
    (b'{"a": 1}', "application/json; charset=utf-16", 415, "utf-16"),
    (b"hello", JSON, 400, "not valid JSON: Expecting value (at offset 0)"),
    (b'{"a": [1, 2', JSON, 400, "ends too early"),
    (b"[1]", JSON, 400, "a JSON object, not an array"),
    (b'"x"', JSON, 400, "not a string"),
    (b"null", JSON, 400, "not null"),
    (b"[" * 5000 + b"]" * 5000, JSON, 400, "the body"),
    (b'{"a": ' + b"9" * 5000 + b"}", JSON, 400, "not valid JSON"),
    (b'{"a": 1e999}', JSON, 400, "out of range"),
    (b'{"a": NaN}', JSON, 400, "NaN is not a JSON number"),
    (b'{"a": 18446744073709551616}', JSON, 400, "a: the number does not fit in 64 bits"),
    (b'{"a": "\xff"}', JSON, 400, "not valid UTF-8 (byte 0xff at offset 7)"),
    (b'{"a": "\xed\xa0\x80"}', JSON, 400, "not valid UTF-8"),
    (b'{"m": [{"c": "x\\ud800"}]}', JSON, 400, "m.0.c: a string holds a lone UTF-16 "
     "surrogate (\\ud800 at character 1)"),
    (b'{"\\udfff": 1}', JSON, 400, "a key holds a lone UTF-16 surrogate"),
])
def test_refused_with_a_reason(raw: bytes, ctype: str | None, status: int, words: str) -> None:
    with pytest.raises(BadBody) as e:
        parse(raw, ctype)
    assert e.value.status == status and words in e.value.message, e.value.message
    json.dumps(e.value.message).encode("utf-8")  # the message itself is valid text


def test_depth_limit_is_exact() -> None:
    def nested(n: int) -> bytes:  # n levels of objects, the body's own included
        return b'{"a": ' * (n - 1) + b"{}" + b"}" * (n - 1)

    assert parse(nested(MAX_DEPTH), JSON)
    with pytest.raises(BadBody, match=f"deeper than {MAX_DEPTH}"):
        parse(nested(MAX_DEPTH + 1), JSON)


@pytest.mark.parametrize("ctype", [JSON, "application/json; charset=UTF-8",
                                   "Application/JSON", "application/vnd.api+json"])
def test_accepted(ctype: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "h\u00e9 \U0001f600"}],
            "seed": 2**63 - 1, "temperature": 0.5}
    assert parse(json.dumps(body).encode(), ctype) == body
    assert parse(json.dumps(body, ensure_ascii=False).encode(), ctype) == body
