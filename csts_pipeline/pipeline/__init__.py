"""The frame every stage shares: errors, devices, manifests, schemas, shards, records, the commit, the stage
protocol and its executors. It imports no stage."""

__version__ = "0.1.0"
