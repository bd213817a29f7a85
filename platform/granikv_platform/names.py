"""Names that the platform and the agents layer share: what a team (or a service, or a
team spec file) may be called, the header that names the calling team when API keys are
off, the one that names the replica that served an answer, and the one by which a team
chat names the context it expects. No imports beyond
``re``: the agents layer imports this without FastAPI or Ray."""

from __future__ import annotations

import re

TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
TEAM_HEADER = "X-GraniKV-Team"
REPLICA_HEADER = "x-granikv-replica"  # on every answer: the LLM replica that served it
CONTEXT_HEADER = "X-GraniKV-Context"
"""On a team chat: the prefix id of the context the caller pinned. A replica whose view
of the team's context differs asks the registry; a context replaced meanwhile is a 409,
never a chat served with another context."""
