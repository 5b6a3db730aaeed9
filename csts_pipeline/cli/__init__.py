"""The `csts-pipeline` command line (typer): the data stages' commands made from the stage registry
(csts_pipeline/cli/stages.py, with each stage's own options below), train and evaluate (cli/train.py), annotate
(cli/annotate.py) and export (cli/publish.py). User mistakes become a one-line error and exit status 2."""

from __future__ import annotations

import logging

import typer

from csts_pipeline.cli import annotate_crossfit, annotate_import, annotate_model, embed, filter, mine, stages
from csts_pipeline.cli.annotate import annotate_app
from csts_pipeline.cli.publish import register as register_publish_command
from csts_pipeline.cli.report import register as register_report_command
from csts_pipeline.cli.train import register as register_train_commands

app = typer.Typer(
    help="Build C-STS datasets from image-caption corpora: embed -> mine -> filter -> annotate -> train.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
log = logging.getLogger("csts-pipeline")

# each data stage's own options live beside its command: cli/embed.py, cli/mine.py, cli/filter.py
stages.register(
    app,
    {"embed": embed.OPTIONS, "mine": mine.OPTIONS, "filter": filter.OPTIONS},
    {"filter": filter.run_filter},
)

# train / evaluate (C-STS models): csts_pipeline/cli/train.py
register_train_commands(app)


# annotate: the round trip (cli/annotate.py) and its language-model commands (cli/annotate_model.py)
assert annotate_model.annotate_app is annotate_app
assert annotate_crossfit.annotate_app is annotate_app  # annotate crossfit: cli/annotate_crossfit.py
assert annotate_import.annotate_app is annotate_app  # annotate import|split|audit: cli/annotate_import.py
app.add_typer(annotate_app, name="annotate")
# export: publish the C-STS splits as a Hugging Face dataset folder (csts_pipeline/cli/publish.py)
register_publish_command(app)
# report: a static page to inspect a run (csts_pipeline/cli/report.py, report/)
register_report_command(app)


def main() -> None:
    app()
