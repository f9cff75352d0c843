"""Planning: the bandwidth LP and its flows, rate allocation, priority orders, duration estimates, learned timings, coflow machinery and the lower bound on mean JCT."""

# The slot lengths' default and least (seconds), here so that the configuration and the
# option parsers read them without importing the LP and SciPy. The least: an agent applies
# each slot's rates with a tc change or a pacing update, which take far longer than a
# microsecond slot, and a plan's size grows as its horizon over the slot (1e-9 s slots
# never finished planning).
DEFAULT_SLOT_S = 0.1
MIN_SLOT_S = 1e-3
SLOT_S_RULE = f"must be a number of seconds of at least {MIN_SLOT_S:g} (1 ms)"
