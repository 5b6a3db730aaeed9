"""`python -m pipeline` is the same as the `csts-pipeline` command."""

from pipeline.cli import main

main()
