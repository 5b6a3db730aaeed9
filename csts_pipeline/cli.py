"""The `csts-pipeline` command line (typer): the data stages' commands made from the stage registry
(csts_pipeline/stage_cli.py, with each stage's own options below), train and evaluate (train_cli.py), annotate
(annotate_cli.py) and export (publish_cli.py). User mistakes become a one-line error and exit status 2."""

from __future__ import annotations

import logging

import typer

from csts_pipeline import annotate_model_cli, embed_cli, filter_cli, mine_cli, stage_cli
from csts_pipeline.annotate_cli import annotate_app
from csts_pipeline.publish_cli import register as register_publish_command
from csts_pipeline.report_cli import register as register_report_command
from csts_pipeline.train_cli import register as register_train_commands

app = typer.Typer(
    help="Build C-STS datasets from image-caption corpora: embed -> mine -> filter -> annotate -> train.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
log = logging.getLogger("csts-pipeline")

# each data stage's own options live beside its command: embed_cli.py, mine_cli.py, filter_cli.py
stage_cli.register(
    app,
    {"embed": embed_cli.OPTIONS, "mine": mine_cli.OPTIONS, "filter": filter_cli.OPTIONS},
    {"filter": filter_cli.run_filter},
)

# train / evaluate (C-STS models): csts_pipeline/train_cli.py
register_train_commands(app)


# annotate: the round trip (annotate_cli.py) and its language-model commands (annotate_model_cli.py)
assert annotate_model_cli.annotate_app is annotate_app
app.add_typer(annotate_app, name="annotate")
# export: publish the C-STS splits as a Hugging Face dataset folder (csts_pipeline/publish_cli.py)
register_publish_command(app)
# report: a static page to inspect a run (csts_pipeline/report_cli.py, report/)
register_report_command(app)


def main() -> None:
    app()
