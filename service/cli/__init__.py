"""The command line: ``gpuplace`` and its commands (data, models, cluster, performance, sim, serve, loop,
quickstart).
"""
