"""Shared parts of csts-pipeline: manifests, dataset readers, shard I/O, stage records, devices and the CLI."""

__version__ = "0.1.0"
