"""`python -m csts_pipeline` is the same as the `csts-pipeline` command."""

from csts_pipeline.cli import main

main()
