"""The edge of the agents layer: the run service's options (``config.services``) and the
REST bodies of ``/teams/{team}/runs``."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from granikv_agents.graph import RetryConfig
from granikv_agents.graphs import DEFAULT_GRAPH_MODULES
from granikv_agents.spec import TeamSpec
from granikv_platform.database import is_postgres
from granikv_platform.env import data_path
from granikv_platform.names import TEAM_RE

RUN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class RetryOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    max_attempts: int = Field(10, ge=1, le=100, description="Attempts of one LLM call, "
                              "the first included, before the run fails (resumable); "
                              "the default waits about 48 s in all.")
    initial_interval_s: float = Field(0.5, gt=0, description="Wait before the first retry.")
    backoff_factor: float = Field(2.0, ge=1.0, description="Wait growth per retry.")
    max_interval_s: float = Field(8.0, gt=0, description="Longest wait between retries.")

    def config(self) -> RetryConfig:
        return RetryConfig(self.max_attempts, self.initial_interval_s, self.backoff_factor,
                           self.max_interval_s)


class AgentsOptions(BaseModel):
    """``options`` of the agents service in ``config.services``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    store_path: str | None = Field(None, description="The runs' store and checkpoints: a "
                                   "SQLite file on the node of the service's replica "
                                   "(default <tmp>/granikv-<app>-runs.sqlite) or a "
                                   "postgresql:// URL.")
    specs_dir: str = Field("deploy/teams", description="Team spec files that POST /runs "
                           "can name ({\"spec_name\": ...}); a relative path is the repository's, "
                           "else the installed package's (deploy/...).")
    auto_resume: bool = Field(True, description="A (re)started service resumes the runs "
                              "that its predecessor left unfinished.")
    retry: RetryOptions = Field(default_factory=lambda: RetryOptions.model_validate({}))
    call_timeout_s: float = Field(300.0, gt=0, description="Longest wait for one LLM call.")
    drain_s: float = Field(10.0, ge=0, description="On shutdown, how long running turns "
                           "may finish before their runs are interrupted.")
    graph_modules: tuple[str, ...] = Field(
        DEFAULT_GRAPH_MODULES, description="Modules (a package counts with its modules) "
        "whose functions a team spec's 'graph: module:function' may name; a spec naming "
        "another is refused when it is submitted (400), and its module is not imported.")

    threads_url: str | None = Field(None, description="The threads' store and checkpoints: "
                                    "a SQLite file or a postgresql:// URL; default "
                                    "<store>-threads.sqlite beside a SQLite store_path, "
                                    "store_path's database for a Postgres one.")
    sse_ping_s: float = Field(15.0, gt=0, description="A thread run's event stream sends "
                              "a keep-alive comment after this long without an event.")

    def threads_store(self, app: str) -> str:
        if self.threads_url:
            return self.threads_url
        store = self.store_file(app)
        if is_postgres(store):  # its own tables beside the runs' (threads: uuids, runs: run-)
            return store
        return store.removesuffix(".sqlite") + "-threads.sqlite"

    def store_file(self, app: str) -> str:
        """The run store: a SQLite file (its folder made) or a Postgres URL."""
        if self.store_path and is_postgres(self.store_path):
            return self.store_path
        path = Path(self.store_path or Path(tempfile.gettempdir()) / f"granikv-{app}-runs.sqlite")
        path.parent.mkdir(parents=True, exist_ok=True)
        return str(path)

    def specs_folder(self) -> Path:
        """An absolute specs_dir as given; a relative one in the checkout, else in the
        installed package's data (an image's non-editable install)."""
        p = Path(self.specs_dir)
        return p if p.is_absolute() else data_path(self.specs_dir)


class RunCreate(BaseModel):
    """POST /teams/{team}/runs: a spec (inline, context included) or a spec file's name."""

    model_config = ConfigDict(extra="forbid")
    spec: TeamSpec | None = Field(None, description="The team spec; its team must be the "
                                  "route's.")
    spec_name: str | None = Field(None, pattern=TEAM_RE.pattern,
                                  description="A spec file of the service's specs_dir.")
    task: str | None = Field(None, min_length=1, description="Replaces the spec's task.")

    @model_validator(mode="after")
    def _one(self) -> RunCreate:
        if (self.spec is None) == (self.spec_name is None):
            raise ValueError("give exactly one of 'spec' or 'spec_name'")
        return self

    def wire(self) -> dict[str, Any]:
        """What crosses to the service: the spec as validated (context inline)."""
        return {"spec": self.spec.model_dump(mode="json") if self.spec else None,
                "spec_name": self.spec_name, "task": self.task}
