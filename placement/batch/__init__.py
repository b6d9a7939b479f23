"""Placing a window of jobs at once: first-fit decreasing, a grouping genetic algorithm (DEAP), CP-SAT (OR-
Tools), and the bounds that judge them.
"""
