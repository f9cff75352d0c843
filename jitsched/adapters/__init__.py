"""Framework adapters: a live training job's DAG and per-step timings for :mod:`jitsched.client.sdk` (each imports its framework lazily)."""
