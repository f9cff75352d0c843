"""Planning: the bandwidth LP and its flows, rate allocation, priority orders, duration estimates, learned timings, coflow machinery and the lower bound on mean JCT."""
