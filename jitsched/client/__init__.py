"""The client side: the daemon's client (``api``), raw-TCP transfers (``transfer``), the emulated job runner (``runner``) and the training-loop SDK (``sdk``)."""

from jitsched.client.api import Client, RemoteError, announced_flow, load_graph_job

__all__ = ["Client", "RemoteError", "announced_flow", "load_graph_job"]
