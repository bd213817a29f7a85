"""README.md's claims a newcomer acts on, held to the code and to docs/benchmarks/.

- Every row of README's speed tables names when, on which code and on which GPU it was
  measured; a workload that README calls unmeasured has no row in any table of
  docs/benchmarks/.
- The files ``make run`` keeps are where README says: the paths are the code's own
  defaults for ``deploy/local.yaml``'s app.
- What the docs' Python examples leave in the repository root is ignored by git.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import yaml

from granikv_agents.schemas import AgentsOptions
from granikv_platform.response_store import default_store_url

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks"
DATE = re.compile(r"\b2\d{3}-\d{2}-\d{2}\b")
COMMIT = re.compile(r"`[0-9a-f]{7,40}`")
GPU = re.compile(r"\b(?:H100|H200|A100|L40S|B200)\b")


def speed_tables() -> list[tuple[str, list[str]]]:
    """README's tables under its "Speed" heading: (the prose since the table before, the
    table's rows without its header and rule)."""
    section = README.read_text().split("## Speed", 1)[1].split("\n## ", 1)[0]
    tables: list[tuple[str, list[str]]] = []
    prose: list[str] = []
    rows: list[str] = []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            rows.append(line)
            continue
        if rows:
            body = [r for r in rows[2:] if not set(r) <= set("|-: ")]
            tables.append(("\n".join(prose), body))
            prose, rows = [], []
        prose.append(line)
    return tables


def prose(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("|"))


def test_every_speed_row_names_its_date_code_and_gpu() -> None:
    """A figure without its date, code and GPU cannot be checked or repeated; a table
    may give them once, in the prose just above it."""
    tables = speed_tables()
    assert len(tables) >= 2
    for preface, rows in tables:
        assert rows
        for row in rows:
            for what, pattern in (("date", DATE), ("commit", COMMIT), ("GPU", GPU)):
                assert pattern.search(row) or pattern.search(preface), (
                    f"no {what} for: {row}")


def test_no_workload_called_unmeasured_has_a_measurement() -> None:
    unmeasured: set[str] = set()
    for sentence in re.split(r"(?<=\.)\s", prose(README.read_text())):
        if re.search(r"not (?:been )?(?:measured|run)", sentence):
            unmeasured |= set(re.findall(r"\bW\d+\b(?!-online)", sentence))
    assert unmeasured == {"W6", "W7"}  # what README says today; this test keeps it true
    for table in BENCHMARKS.glob("*.md"):
        for line in table.read_text().splitlines():
            for w in unmeasured:
                assert not re.match(rf"\|\s*{w}\b(?!-online)", line), (
                    f"README calls {w} unmeasured; {table.name} has: {line}")


def test_the_files_make_run_keeps_are_where_readme_says() -> None:
    app = yaml.safe_load((ROOT / "deploy" / "local.yaml").read_text())["applications"][0]
    name = app["args"]["name"]
    opts = AgentsOptions.model_validate(app["args"]["services"][0]["options"])
    tmp = tempfile.gettempdir()
    text = README.read_text().replace("$TMPDIR", tmp)
    for path in (opts.store_file(name), opts.threads_store(name), default_store_url(name)):
        assert f"`{path}`" in text, f"README does not say make run keeps {path}"
    assert "~/.ray/auth_token" in text


def test_what_the_examples_leave_in_the_root_is_ignored() -> None:
    """agents/README.md's review_run.py opens ``runs.sqlite`` in the working folder."""
    leftovers = ["runs.sqlite", "runs.sqlite.lock", "runs.sqlite-wal", "runs.sqlite-shm"]
    out = subprocess.run(["git", "check-ignore", *leftovers], cwd=ROOT, text=True,
                         capture_output=True, check=False)
    assert sorted(out.stdout.split()) == sorted(leftovers)
