"""The snippets `make run` prints next to "serving at": the curl body is valid JSON for
the served model, and the Python lines are valid Python against the team's root."""

from __future__ import annotations

import json
import shlex

from granikv_agents.demo import quickstart


def test_the_printed_snippets_are_valid() -> None:
    lines = quickstart("http://127.0.0.1:8000", "tiny-llama", "red", "gk-key")
    assert lines[0].startswith("model: tiny-llama") and "/teams/red/v1" in lines[0]
    curl = " ".join(ln.strip().rstrip("\\") for ln in lines if ln.lstrip().startswith(
        ("curl", "-H 'Content")))
    args = shlex.split(curl)
    assert args[2] == "http://127.0.0.1:8000/teams/red/v1/chat/completions"
    assert "Authorization: Bearer gk-key" in args
    assert json.loads(args[args.index("-d") + 1])["model"] == "tiny-llama"
    python = "\n".join(ln[2:] for ln in lines[lines.index(
        "or from Python (pip install openai):") + 1:])
    compile(python, "<snippet>", "exec")
    assert "base_url='http://127.0.0.1:8000/teams/red/v1'" in python
