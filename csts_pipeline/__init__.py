"""The csts-pipeline application, C-STS datasets from image-caption corpora (embed, mine, filter, annotate, train):
the command line over the frame (pipeline/), the stages (stages/) and the run report (report/)."""
