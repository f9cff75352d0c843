"""Benchmarks and paper-reproduction scripts of jitsched."""
