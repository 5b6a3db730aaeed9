"""The frame every stage shares: errors, devices, manifests, dataset readers, schemas, shards, records, the stage
protocol and its executors. It imports no stage."""

__version__ = "0.1.0"
