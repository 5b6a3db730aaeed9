"""What the CLI runs: each annotate step reads its inputs, calls crowd/ and labels/, and commits its folder."""
