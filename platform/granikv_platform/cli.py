"""The platform's commands (``python -m granikv_platform.cli``): operating the Serve app.

    keys      write an API keys file: a new key per team named (and the operator's)
    validate  build the Serve applications of a config file (or a RayService manifest)

The ``granikv`` command line adds ``run``, the agent-team walkthrough, on top
(granikv_agents/cli.py): the agents layer builds on the platform, never the reverse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="GraniKV platform: serve GraniKV-enabled vLLM on Ray Serve.")


@app.command()
def keys(
    path: Annotated[Path, typer.Argument(help="Keys file to write (0600; replaced).")],
    teams: Annotated[list[str], typer.Argument(help="Teams that get a key.")],
    admin: Annotated[bool, typer.Option(help="Also an operator key (@admin).")] = True,
) -> None:
    """Write a new API key per team (and the operator's) to PATH, and print them."""
    from granikv_platform.auth import OPERATOR, new_key, write_keys_file

    made = {who: new_key() for who in [*teams, *([OPERATOR] if admin else [])]}
    write_keys_file(path, made.items())
    typer.echo(f"wrote {len(made)} keys to {path}; serve with auth.keys_file: {path} "
               f"or GRANIKV_API_KEYS_FILE={path}")
    for who, key in made.items():
        typer.echo(f"  {who:<10} {key}")


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="Serve config or RayService file.")],
) -> None:
    """Validate a config and build its Serve applications (starts nothing)."""
    from granikv_platform.builder import build_app
    from granikv_platform.loader import load_serve_config

    for spec in load_serve_config(config).apps:
        build_app(spec.config)
        e = spec.config.engine
        typer.echo(f"{spec.name}: {spec.config.model.model_id} on {e.accelerator}, "
                   f"TP {e.tensor_parallel_size}, {spec.config.replicas.num_replicas} "
                   f"replica(s), teams {[t.name for t in spec.config.teams]} at "
                   f"{spec.route_prefix}, auth {spec.config.auth.mode}")


if __name__ == "__main__":
    app()
