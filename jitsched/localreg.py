"""Local flow registration: a process hands a connected TCP socket to its host's agent for pacing.

Both sides use this module: the client library (:mod:`jitsched.client`)
registers the sockets of its transfers with :func:`register_flow`, and the
host agent (:mod:`jitsched.agents.agent`) listens at :func:`local_address`
and decodes the same messages. The exchange runs over an abstract Unix
``SOCK_SEQPACKET`` socket (one per network namespace): a ``register_flow``
request of :mod:`jitsched.protocol` carrying the socket as ``SCM_RIGHTS``,
the agent's reply, and later an ``unregister_flow`` request on the same
connection.
"""

from __future__ import annotations

import socket

from jitsched.protocol import MsgType, ProtocolError, Reply, decode_any, encode_request

LOCAL_PREFIX = "jitsched-agent"


def local_address(host: str, namespace: str = "") -> str:
    """The abstract Unix socket name where the agent of ``host`` takes flow registrations."""
    return f"\0{LOCAL_PREFIX}-{namespace}-{host}" if namespace else f"\0{LOCAL_PREFIX}-{host}"


def flow_body(flow_id: str, direction: str) -> dict:
    """The body of a ``register_flow`` / ``unregister_flow`` request."""
    # "out" is the default: such bodies stay what agents before ingress enforcement accept
    return {"flow": flow_id} if direction == "out" else {"flow": flow_id, "direction": direction}


def register_flow(local_name: str, flow_id: str, sock: socket.socket,
                  timeout_s: float = 2.0, direction: str = "out") -> socket.socket | None:
    """Hand ``sock`` to the local agent for pacing; returns the control connection (keep it
    open until :func:`unregister_flow`), or None if no agent listens at ``local_name``.

    ``direction``: ``"out"`` when this host sends the flow, ``"in"`` when it
    receives it (for an agent enforcing its ingress too).
    """
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(timeout_s)
    try:
        c.connect(local_name)
        socket.send_fds(c, [encode_request(MsgType.REGISTER_FLOW, flow_body(flow_id, direction))],
                        [sock.fileno()])
        rep = decode_any(c.recv(65536))
    except (OSError, ProtocolError):  # no agent, or it went away mid-request
        c.close()
        return None
    if not isinstance(rep, Reply) or not rep.ok:
        c.close()
        return None
    return c


def unregister_flow(ctrl: socket.socket | None, flow_id: str, direction: str = "out") -> None:
    """Tell the agent the flow is over and close the control connection."""
    if ctrl is None:
        return
    try:
        ctrl.send(encode_request(MsgType.UNREGISTER_FLOW, flow_body(flow_id, direction)))
        ctrl.recv(65536)
    except OSError:
        pass
    finally:
        ctrl.close()


__all__ = ["LOCAL_PREFIX", "flow_body", "local_address", "register_flow", "unregister_flow"]
