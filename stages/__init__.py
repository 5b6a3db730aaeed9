"""One module per pipeline stage. Stages meet only at their on-disk Parquet schemas (docs/schemas.md)."""
