"""Replaying real traces: trace jobs with their estimates, comparisons of policies on real clusters, and their
plots.
"""
