"""Host agents: receive per-slot schedules from the daemon and enforce them."""
