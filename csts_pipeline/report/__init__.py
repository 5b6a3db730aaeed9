"""The run report: one static HTML page (with its thumbnails and plots beside it) to inspect a run by eye.

It reads the stages' outputs only through their tables (pipeline.schemas) and stage records (pipeline.records),
and bounded samples of them, so a COCO-sized run costs no more memory than the sample (docs/report.md)."""
