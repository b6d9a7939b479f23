"""Training to serving: train and register a challenger, evaluate it honestly, promote it through the gate, the
registered bundle and its serving adapter, feedback, drift and reports.
"""
