"""Placement: the cluster model and topology, and (later) the policies that put tasks on machines."""
