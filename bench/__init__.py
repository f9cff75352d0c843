"""The benches, installed with jitsched as ``jitsched.bench``: ``python bench/NAME.py`` or ``python -m bench.NAME`` from a checkout, ``python -m jitsched.bench.NAME`` anywhere."""
