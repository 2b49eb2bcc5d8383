"""The worker registry (the rows the workers' heartbeats keep) and the reaper that re-queues what
dead workers leave. The worker side (heartbeats, lease keeping) is in :mod:`scheduler`."""
