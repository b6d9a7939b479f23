"""Trace ingestion: source adapters into the canonical job table, and (later) model training."""
