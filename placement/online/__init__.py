"""Placing one job at a time: the greedy step over machines, the scorers and the policies made of them, and per-
machine answers for a scheduler that chooses itself (the Kubernetes extender).
"""
