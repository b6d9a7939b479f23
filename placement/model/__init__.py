"""What placement reasons about: the cluster and its topology, jobs' demands, snapshots of what is allocated,
decisions, and the models of what a placement costs (network, speed).
"""
