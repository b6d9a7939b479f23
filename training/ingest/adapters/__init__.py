"""Source adapters: each maps one trace format into the canonical job table (``training.ingest.schema``)."""
