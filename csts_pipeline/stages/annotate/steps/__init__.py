"""What the CLI runs: each annotate step reads its inputs, calls crowd/, aggregation/ and labels/, and commits
its folder."""
