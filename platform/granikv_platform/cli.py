"""``granikv`` command line (``python -m granikv_platform.cli``).

    run       start local Ray + the Serve app(s) of a config (deploy/local.yaml), run the
              example agent team (deploy/teams/review.yaml) through the app's
              /teams/{team}/runs, print its context pin, the agents' answers and the
              GraniKV statistics, then keep serving until Ctrl-C (--once: exit)
    validate  build the Serve applications of a config file (or a RayService manifest)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from granikv_platform.env import REPO_ROOT, PlatformEnv

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="GraniKV platform: serve GraniKV-enabled vLLM on Ray Serve.")
ENV = PlatformEnv.from_environ()
EXAMPLE_TEAM = REPO_ROOT / "deploy" / "teams" / "review.yaml"


@app.command()
def run(
    config: Annotated[Path, typer.Option(help="Serve config file to run.")] = ENV.config_path,
    spec: Annotated[Path, typer.Option(help="Team spec to run (its team must be one of "
                                       "the config's).")] = EXAMPLE_TEAM,
    max_tokens: Annotated[int | None, typer.Option(help="Cap every agent's answer "
                                                   "(default: the spec's).")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port (default: the config's).")
                    ] = ENV.http_port,
    once: Annotated[bool, typer.Option("--once", "--no-serve",
                                       help="Exit after printing, instead of serving.")] = False,
    verbose: Annotated[bool, typer.Option(help="Stream the replicas' logs here.")] = False,
) -> None:
    """Start the app locally, run the example team, print answers and statistics."""
    from granikv_agents.spec_file import load_spec  # the agents' spec files (YAML edge)
    from granikv_platform import local
    from granikv_platform.demo import run_demo
    from granikv_platform.loader import load_serve_config

    team_spec = load_spec(spec).model_dump(mode="json")
    serve_file = load_serve_config(config)
    http = serve_file.http_options
    host = ENV.http_host or http.get("host", "127.0.0.1")
    port = port or int(http.get("port", 8000))
    typer.echo(f"starting Ray and {', '.join(a.name for a in serve_file.apps)} from {config} "
               "(engine start-up takes 15-60 s on CPU) ...")
    t0 = time.monotonic()
    url = local.start(serve_file, host, port, ray_address=ENV.ray_address, verbose=verbose)
    try:
        root = url + serve_file.apps[0].route_prefix.rstrip("/")
        typer.echo(f"serving at {root} (up in {time.monotonic() - t0:.0f} s)")
        if any(a.config.engine.dummy_weights for a in serve_file.apps):
            typer.echo("(random dummy weights: the answers are noise; the numbers are the point)")
        report = run_demo(root, team_spec, max_tokens, echo=typer.echo)
        totals = report.totals()
        typer.echo(f"totals: {totals['hits']} HOT hits, {totals['bind_errors']} bind errors")
        if not once:
            typer.echo(f"\nserving at {root}  (OpenAI root {root}/v1, team roots "
                       f"{root}/teams/<team>/v1, team runs {root}/teams/<team>/runs, "
                       f"metrics {root}/metrics); Ctrl-C to stop")
            _wait_forever()
    finally:
        local.stop()


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
                   f"{spec.route_prefix}")


def _wait_forever() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        typer.echo("stopping ...")


if __name__ == "__main__":
    app()
