# cython: language_level=3
"""Constants the kernels share with the Python side, defined once (private)."""

# Node kinds of jitsched.dag.model (DagArrays.kind, int8): computes first in every job.
cdef enum:
    COMPUTE = 0
    TRANSFER = 1

# Node states of jitsched.policies.base (SchedulerView.state, int8), so that a
# kernel reading the state array names them as the policies do.
cdef enum:
    WAITING = 0
    RUNNING = 1
    DONE = 2
