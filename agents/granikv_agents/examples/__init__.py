"""Team graphs written with ``granikv_agents.kit``: name one in a spec's ``graph``."""
