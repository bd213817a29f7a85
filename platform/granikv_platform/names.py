"""Names that the platform and the agents layer share: what a team (or a service, or a
team spec file) may be called, and the header that names the calling team when API keys
are off. No imports beyond ``re``: the agents layer imports this without FastAPI or Ray."""

from __future__ import annotations

import re

TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
TEAM_HEADER = "X-GraniKV-Team"
