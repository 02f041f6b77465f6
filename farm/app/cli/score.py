"""`farm score`: score one request in this process through the same stage code and sandbox as the farm."""

from __future__ import annotations

import json
import sys

import click

from farm import registry
from farm.pipeline import InvalidInput
from farm.results import Result
from workers.runner import score as run_score


def load_payload(text: str, source: str) -> dict:
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"{source} is not valid JSON: {exc}", param_hint="--input") from None
    if not isinstance(payload, dict):
        raise click.BadParameter(f"{source} must hold a JSON object, not {type(payload).__name__}", param_hint="--input")
    return payload


def summary(result: Result) -> str:
    lines = [f"status   {result.status.value}" + (f" (at stage {result.stage})" if result.stage else ""),
             f"reward   {result.reward:g}"]
    if result.outcome:
        lines.append(f"outcome  {result.outcome.value}")
    for s in result.stages:
        first = s.message.strip().splitlines()[0] if s.message.strip() else ""
        lines.append(f"  {s.name:<12} {s.status:<14} {s.seconds:8.3f} s  {first}")
    if result.message:
        lines.append("message  " + result.message.rstrip().replace("\n", "\n         "))
    return "\n".join(lines)


@click.command()
@click.option("--pipeline", "pipeline_name", required=True, help="cuda, code, math, synthetic or a plugin's name")
@click.option("--input", "input_path", required=True, type=click.Path(allow_dash=True, dir_okay=False),
              help="a JSON object with the response and the reference data ('-' for stdin)")
@click.option("--json", "as_json", is_flag=True, help="print the result object as JSON")
def score(pipeline_name: str, input_path: str, as_json: bool) -> None:
    """Score one request in-process (no broker): for debugging a reward."""
    try:
        pipeline = registry.get(pipeline_name)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--pipeline") from None
    if input_path == "-":
        text, source = sys.stdin.read(), "stdin"
    else:
        try:
            with open(input_path, encoding="utf-8") as fh:
                text, source = fh.read(), input_path
        except OSError as exc:
            raise click.BadParameter(f"cannot read {input_path}: {exc.strerror}", param_hint="--input") from None
    result = run_score(pipeline, load_payload(text, source))
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else summary(result))
