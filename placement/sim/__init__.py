"""Trace replay: real jobs through the same policies and state as the service, judged by JCT and more."""
