"""Enforcement backends of the host agent, registered by name."""
