"""Estimators: what a job will really need (resources, duration), with quantiles and a model version."""
