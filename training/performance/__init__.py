"""Fitting the job-performance model from real profiles."""
