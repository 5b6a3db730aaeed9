"""train and evaluate: C-STS models fine-tuned and scored on C-STS files given by path (`--data`: annotate split's
`<annotate>/csts/` or any file with the C-STS columns), fingerprinted as the output's inputs; no stage above them."""
