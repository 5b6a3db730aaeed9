"""The csts-pipeline application: the command line over the frame (pipeline/) and the stages (stages/)."""
