"""``granikv`` command line (``python -m granikv_agents.cli``): the platform's commands
(granikv_platform/cli.py) and the agent-team walkthrough that ``make run`` starts.

    run       start local Ray + the Serve app(s) of a config (deploy/local.yaml), run the
              example agent team (deploy/teams/review.yaml) through the app's
              /teams/{team}/runs, print its context pin, the agents' answers and the
              GraniKV statistics, then keep serving until Ctrl-C or SIGTERM (--once:
              exit); either stops Serve and Ray and removes this run's files. Without
              a keys file (auth.keys_file, GRANIKV_API_KEYS_FILE) it makes API keys for
              this run only, and prints them. Its cluster listens on 127.0.0.1 with
              Ray's token auth (RAY_AUTH_MODE=disabled: refused unless
              --allow-ray-auth-disabled).
    keys      write an API keys file: a new key per team named (and the operator's)
    validate  build the Serve applications of a config file (or a RayService manifest)
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from granikv_agents.spec_file import load_spec
from granikv_platform import cli as platform_cli
from granikv_platform.env import PlatformEnv, data_path

if TYPE_CHECKING:
    from granikv_platform.loader import ServeFile

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="GraniKV: serve GraniKV-enabled vLLM on Ray Serve; run agent teams.")
app.command()(platform_cli.keys)
app.command()(platform_cli.validate)
ENV = PlatformEnv.from_environ()
EXAMPLE_TEAM = data_path("deploy/teams/review.yaml")


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
    allow_ray_auth_disabled: Annotated[bool, typer.Option(
        "--allow-ray-auth-disabled", help="Start the local cluster even with "
        "RAY_AUTH_MODE=disabled (anyone who reaches 127.0.0.1 can then call Ray).")] = False,
) -> None:
    """Start the app locally, run the example team, print answers and statistics."""
    from granikv_platform.loader import load_serve_config
    from granikv_platform.local import check_loopback_front, check_ray_auth, stop_on_sigterm

    if ENV.ray_address is None:
        try:
            check_loopback_front(ENV)
            check_ray_auth(ENV, allow_ray_auth_disabled)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
    stop_on_sigterm()  # SIGTERM and Ctrl-C alike: Serve and Ray stop, the keys go
    team_spec = load_spec(spec).model_dump(mode="json")
    keys_dir = Path(tempfile.mkdtemp(prefix="granikv-keys-"))
    try:
        serve_file, keys = _api_keys(load_serve_config(config), keys_dir)
        if keys is not None and team_spec["team"] not in keys:
            raise typer.BadParameter(f"the keys file holds no clear-text key of team "
                                     f"{team_spec['team']!r} for the demo")
        _serve(serve_file, config, team_spec, keys, port, max_tokens, once, verbose,
               allow_ray_auth_disabled)
    finally:
        shutil.rmtree(keys_dir, ignore_errors=True)  # this run's keys die with it


def _api_keys(serve_file: ServeFile, folder: Path) -> tuple[ServeFile, dict[str, str] | None]:
    """The serve file with its keys file, and the clear-text keys the demo may use
    (None: no app requires keys). No keys file configured: fresh keys in ``folder``."""
    from granikv_platform import local
    from granikv_platform.auth import plain_keys

    keyed = [a for a in serve_file.apps if a.config.auth.mode == "keys"]
    if not keyed:
        return serve_file, None
    named = next((Path(a.config.auth.keys_file) for a in keyed if a.config.auth.keys_file),
                 ENV.api_keys_file)
    if named is not None:
        return local.with_keys_file(serve_file, named), plain_keys(named)
    serve_file, made = local.dev_keys(serve_file, folder)
    typer.echo("API keys for this run (a fresh set each run; `granikv keys` writes a "
               "lasting file):")
    for who, key in made.items():
        typer.echo(f"  {who:<10} {key}")
    return serve_file, made


def _serve(serve_file: ServeFile, config: Path, team_spec: dict[str, Any],
           keys: dict[str, str] | None, port: int | None, max_tokens: int | None,
           once: bool, verbose: bool, allow_ray_auth_disabled: bool) -> None:
    from granikv_agents.demo import quickstart, run_demo
    from granikv_platform import local
    from granikv_platform.auth import OPERATOR

    http = serve_file.http_options
    host = ENV.http_host or http.get("host", "127.0.0.1")
    port = port or int(http.get("port", 8000))
    typer.echo(f"starting Ray and {', '.join(a.name for a in serve_file.apps)} from {config} "
               f"on {host}:{port} (GRANIKV_HTTP_PORT or --port: another port); on CPU the "
               "replicas' engines take minutes to start, each stage is reported below ...")
    t0 = time.monotonic()
    try:  # a signal during start-up stops what started too
        url = local.start(serve_file, host, port, ray_address=ENV.ray_address,
                          verbose=verbose, echo=typer.echo,
                          allow_ray_auth_disabled=allow_ray_auth_disabled)
        root = url + serve_file.apps[0].route_prefix.rstrip("/")
        model = serve_file.apps[0].config.model.model_id
        typer.echo(f"serving {model} at {root} (up in {time.monotonic() - t0:.0f} s)")
        if any(a.config.engine.dummy_weights for a in serve_file.apps):
            typer.echo("(random dummy weights: the answers are noise; the numbers are the point)")
        keys = keys or {}
        report = run_demo(root, team_spec, max_tokens, echo=typer.echo,
                          api_key=keys.get(team_spec["team"]), admin_key=keys.get(OPERATOR))
        totals = report.totals()
        typer.echo(f"totals: {totals['hits']} HOT hits, {totals['bind_errors']} bind errors")
        if not once:
            team = team_spec["team"]
            typer.echo("")
            for line in quickstart(root, model, team, keys.get(team) if keys else None):
                typer.echo(line)
            typer.echo(f"serving at {root}  (OpenAI root {root}/v1, team roots "
                       f"{root}/teams/<team>/v1, team runs {root}/teams/<team>/runs, "
                       f"metrics {root}/metrics); send 'Authorization: Bearer <key>'; "
                       "Ctrl-C (or SIGTERM) to stop")
            _wait_forever()
    finally:  # a cluster started here: its engines' files go with it
        local.stop(files_wait_s=0.0 if ENV.ray_address else 20.0)


def _wait_forever() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (local.stop_on_sigterm)
        typer.echo("stopping: Serve drains the replicas, then Ray stops (shutdown "
                   "messages from Ray's processes that may follow are expected) ...")


if __name__ == "__main__":
    app()
