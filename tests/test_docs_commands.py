"""The docs' commands run as written: every environment variable they set is one that
something reads, and every test path they give pytest exists.

The docs are README.md, platform/README.md, agents/README.md and docs/*.md. Their shell
code (fenced ``bash``/``sh``/``shell``/``console`` blocks and plain fenced blocks) and
their inline code spans are read without running anything:

- a ``GRANIKV_*`` name anywhere in a doc, and a ``GRANIKV_*`` or ``RAY_*`` name that a
  command sets (``NAME=value``), must be read by the code: a string literal of that name
  in the packages, the tests (this file's own examples aside) or their scripts (the
  ``os.environ`` / ``getenv`` reads, and the constants handed to them), or, for a
  ``RAY_*`` name, in Ray's own Python sources;
- every ``tests/...`` path a ``pytest`` command names matches a file (a glob at least
  one), and a ``path::test`` names a test defined in it.

A name mangled in the text (a figure pasted over part of it, ``GRANIKV_3,778 cases ...``)
reads as a name nothing reads. A figure pasted over a word that the text uses often
(``SIGTERM``) repeats the figure where the word stood: no run of ``REPEAT_WORDS`` words
may appear three times in one doc's prose.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", REPO / "platform" / "README.md",
               REPO / "agents" / "README.md", *(REPO / "docs").glob("*.md")])
SOURCES = ("granikv_engine", "platform", "agents", "tests", "deploy")
SHELL = {"", "bash", "sh", "shell", "console"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
OURS = re.compile(r"(?<![\w$])GRANIKV_\w*\*?")  # GRANIKV_SOAK_*: a family of names
SETS = re.compile(r"(?<![\w$])((?:GRANIKV|RAY)_\w+)=")
REPEAT_WORDS = 12
LITERAL = re.compile(r"""["']((?:GRANIKV|RAY)_\w+)["']|\$\{?((?:GRANIKV|RAY)_\w+)""")


@cache
def names_read() -> frozenset[str]:
    """``GRANIKV_*`` / ``RAY_*`` names in string literals (and shell ``$NAME``s) of the
    repository's code, tests and scripts."""
    files = [p for d in SOURCES for ext in ("*.py", "*.sh") for p in (REPO / d).rglob(ext)]
    files.append(REPO / "Makefile")
    return frozenset(n for p in files if p.is_file() and p != Path(__file__)
                     for n in _literals(p))


@cache
def names_ray_reads() -> frozenset[str]:
    """``RAY_*`` names in string literals of Ray's own Python sources."""
    import ray

    root = Path(ray.__file__).parent
    return frozenset(n for p in root.rglob("*.py") for n in _literals(p)
                     if n.startswith("RAY_"))


def _literals(path: Path) -> frozenset[str]:
    text = path.read_text(errors="replace")
    return frozenset(a or b for a, b in LITERAL.findall(text))


def shell_code(text: str) -> list[str]:
    """The doc's shell blocks, each with its continuation lines joined."""
    return [body.replace("\\\n", " ") for lang, body in FENCE.findall(text)
            if lang.lower() in SHELL]


def inline_code(text: str) -> list[str]:
    """The doc's inline code spans, outside its fenced blocks."""
    return INLINE.findall(FENCE.sub("", text))


def unread_names(text: str) -> list[str]:
    """Names the doc mentions (``GRANIKV_*``) or sets (``GRANIKV_*``, ``RAY_*``) that
    nothing reads."""
    code = [*shell_code(text), *inline_code(text)]
    ours = set(OURS.findall(text))
    sets = {n for c in code for n in SETS.findall(c)}
    known = names_read()
    bad = {n for n in ours | sets if n not in known
           and not (n.endswith("*") and any(k.startswith(n[:-1]) for k in known))}
    bad -= {n for n in bad if n.startswith("RAY_") and n in names_ray_reads()}
    return sorted(bad)


def repeated_runs(text: str, n: int = REPEAT_WORDS) -> list[str]:
    """Runs of ``n`` words that the doc's prose (fenced blocks aside) has three times or
    more."""
    words = FENCE.sub("", text).split()
    runs = Counter(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))
    return sorted(run for run, count in runs.items() if count >= 3)


def pytest_paths(text: str) -> list[str]:
    """The ``tests/...`` arguments of the pytest commands in the doc's shell blocks."""
    out = []
    for block in shell_code(text):
        for line in block.splitlines():
            command = line.split("#", 1)[0]
            if "pytest" in command:
                out += [w for w in command.split() if w.startswith("tests/")]
    return out


def missing_paths(paths: list[str]) -> list[str]:
    """The paths (globs, ``file::test`` ids) that name nothing in the repository."""
    return [arg for arg in paths if not _names_something(*arg.split("::", 1))]


def _names_something(path: str, test: str = "") -> bool:
    files = sorted(REPO.glob(path)) if any(c in path for c in "*?[") else [REPO / path]
    if not files or not all(f.is_file() or f.is_dir() for f in files):
        return False
    name = test.split("::")[-1].split("[")[0]
    return not name or re.search(rf"^\s*(async\s+)?def {re.escape(name)}\(",
                                 files[0].read_text(), re.M) is not None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_environment_variables_in_the_docs_are_read_by_the_code(doc: Path) -> None:
    assert unread_names(doc.read_text()) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_pytest_paths_in_the_docs_exist(doc: Path) -> None:
    assert missing_paths(pytest_paths(doc.read_text())) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_figure_is_pasted_over_a_repeated_word(doc: Path) -> None:
    assert repeated_runs(doc.read_text()) == []


def test_a_mangled_or_unknown_name_and_a_missing_path_are_reported() -> None:
    text = ("Seeded unless `GRANIKV_3,778 cases over 285 operations_SEED` is set.\n\n"
            "```bash\nGRANIKV_FUZZ_SEED=7 RAY_NOT_A_RAY_SETTING=1 RAY_AUTH_MODE=token \\\n"
            "  .venv/bin/python -m pytest -q tests/reliability/test_fuzz_api.py \\\n"
            "  tests/nowhere.py tests/reliability/test_*_machine.py "
            "tests/test_docs_commands.py::test_none\n```\n")
    assert unread_names(text) == ["GRANIKV_3", "RAY_NOT_A_RAY_SETTING"]
    assert missing_paths(pytest_paths(text)) == [
        "tests/nowhere.py", "tests/test_docs_commands.py::test_none"]
    assert pytest_paths(text)[0] == "tests/reliability/test_fuzz_api.py"
    figure = "stopped in 23.9 s, the stream in flight done; 16 processes, 0 left"
    pasted = f"{figure} is sent. Before, {figure} aborted it; it sends {figure}, and"
    runs = repeated_runs(pasted)
    assert runs and all(run in figure for run in runs), runs
    assert repeated_runs(pasted.replace(figure, "SIGTERM")) == []
