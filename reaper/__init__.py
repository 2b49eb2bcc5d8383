"""Workers, their heartbeats, and (to come) the reaper that re-queues what dead workers leave."""
