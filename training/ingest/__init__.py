"""Trace ingestion: the source catalogue, one adapter per trace format into the canonical job table, CSV readers
whose errors name file, line and column, and atomic Parquet tables.
"""
