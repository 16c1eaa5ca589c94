"""`jobfsm diagram`: the lifecycle as Mermaid, DOT, SVG or PNG, optionally one job's path."""

from __future__ import annotations

import sys

import click

from ..display.diagram import IMAGE_FORMATS, TEXT_FORMATS, path_marks, path_steps, render
from ..errors import BadInput
from ..lifecycle.spec import lifecycle, load_spec
from .connect import engine_for
from .options import store_option


@click.command()
@click.option(
    "--spec", "spec_file", type=click.Path(dir_okay=False), help="Lifecycle spec to draw."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice([*TEXT_FORMATS, *IMAGE_FORMATS]),
    default="mermaid",
    show_default=True,
    help="svg and png need Graphviz's `dot` program.",
)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), help="Write here instead of stdout."
)
@click.option("--job", "job_id", metavar="ID", help="Highlight the path this job took.")
@store_option
def diagram(
    spec_file: str | None, fmt: str, output: str | None, job_id: str | None, store: str | None
) -> None:
    """Draw the lifecycle from the spec (default: the one jobfsm ships).

    With --job, the job's audit trail (from --store) is drawn over it: the states
    it visited are highlighted and its edges are numbered with their steps; its run
    marks (label, external id) are named in the title by step.
    """
    lc = load_spec(spec_file) if spec_file else lifecycle()
    path = None
    title = None
    if job_id is not None:
        with engine_for(store, existing=True) as engine:
            job = engine.get(job_id)
            trail = engine.history(job_id)
            path = path_steps(trail)
        marks = path_marks(trail)
        title = f"job {job.id} ({job.kind}): now {job.state}"
        if marks:
            title += f"; marks: {marks}"
    elif store is not None:
        raise BadInput("--store is only used with --job")
    data = render(lc, fmt, path=path, title=title)
    if output:
        with open(output, "wb") as fh:
            fh.write(data)
        click.echo(f"wrote {fmt} diagram to {output}", err=True)
    elif fmt in IMAGE_FORMATS:
        if sys.stdout.isatty():
            raise BadInput(f"{fmt} is binary: give --output FILE (or redirect stdout)")
        sys.stdout.buffer.write(data)
    else:
        click.echo(data.decode("utf-8"), nl=False)
