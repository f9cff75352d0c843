"""The paper-reproduction bench: Figures 5-11, the regime sweep and the mixed-shape point (``python -m bench.paper``)."""
