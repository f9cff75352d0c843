"""jitsched: a DAG-aware just-in-time network traffic scheduler."""

from jitsched.errors import JitschedError, ValidationError

__version__ = "0.1.0"

__all__ = ["JitschedError", "ValidationError", "__version__"]
