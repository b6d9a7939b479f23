"""The Kubernetes face: the scheduler extender's verbs (filter, prioritize, bind), pods as demands, and its own
listener.
"""
