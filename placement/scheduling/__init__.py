"""Scheduling: the queue in front of placement. Team queues with guaranteed quotas and borrowing, the order
within a queue, priorities and preemption, opportunistic jobs, reservations for the next job to start, and
the one function that turns all of it into a plan (``schedule``): state in, plan out, no I/O, no clock.
"""
