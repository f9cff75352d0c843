"""Attach tickets: the daemon's word, checked by a host's agent, that a local user may act for a job.

A local user names a job to its host's agent (``attach``) by the job's
client-scoped id; only the daemon knows whose the job is. So the daemon, once
it has checked that the asking client owns the job (``attach_job``), signs a
ticket: an HMAC-SHA256 over the job id, the host, the local uid the client
names and an expiry, keyed with that host's ticket key. The daemon derives
every host's key from one secret of its own (:func:`daemon_secret`) and hands
each agent its host's key in the register reply, over the agent's
authenticated channel; the agent checks a ticket with it (:func:`check`)
without asking the daemon. Both sides use this module.

Keys and tickets
----------------
* :func:`daemon_secret` derives the secret from the daemon's CURVE secret key,
  so that daemon replicas and restarts sharing the key directory sign alike;
  a daemon without keys draws a random one per process (its agents get the
  new key when they register with it again).
* :func:`host_key` derives host ``h``'s key from the secret: an agent's key
  signs tickets for its own host only.
* A ticket is a map ``{"job", "host", "uid", "expires_ns", "mac"}``
  (:data:`jitsched.protocol.TICKET`); ``expires_ns`` is the daemon's wall
  clock, which an agent follows through its heartbeats' clock offset.
* ``job`` is a job's client-scoped id, or for an announced background flow
  its agents' flow id itself, ``"/<client>:<name>"`` with keys
  (:func:`jitsched.protocol.background_flow_id`; a job id never starts
  with ``/`` with keys, so neither kind of ticket names the other's flows).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import msgpack

from jitsched.errors import ProtocolError
from jitsched.protocol import ErrorCode

KEY_BYTES = 32  # of the daemon's secret and of each host's key (SHA-256 output)
_SECRET_LABEL = b"jitsched attach tickets v1"  # the daemon secret's derivation label
_HOST_LABEL = b"jitsched host ticket key v1\0"  # ... and a host key's, before the host's name
_TICKET_LABEL = "jitsched attach ticket v1"  # the first element of every signed message


def daemon_secret(curve_secret: bytes | None = None) -> bytes:
    """The daemon's ticket secret, :data:`KEY_BYTES` bytes.

    Parameters
    ----------
    curve_secret : bytes, optional
        The daemon's CURVE secret key (Z85 bytes, :class:`jitsched.keys.DaemonKeys`):
        the secret is an HMAC of it, the same for every process holding that
        key. None: a random secret (a daemon without keys).
    """
    if curve_secret is None:
        return secrets.token_bytes(KEY_BYTES)
    return hmac.new(curve_secret, _SECRET_LABEL, hashlib.sha256).digest()


def host_key(secret: bytes, host: str) -> bytes:
    """Host ``host``'s ticket key (:data:`KEY_BYTES` bytes) under the daemon secret ``secret``."""
    return hmac.new(secret, _HOST_LABEL + host.encode(), hashlib.sha256).digest()


def _mac(key: bytes, job: str, host: str, uid: int, expires_ns: int) -> str:
    # msgpack of a list of strings and ints is one byte string for one list: no
    # separator inside a job id can make two tickets' messages equal
    msg = msgpack.packb([_TICKET_LABEL, job, host, int(uid), int(expires_ns)], use_bin_type=True)
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def issue(secret: bytes, job: str, host: str, uid: int, expires_ns: int) -> dict:
    """A ticket letting local user ``uid`` of host ``host`` name job ``job`` to the agent
    until wall time ``expires_ns`` (ns).

    Parameters
    ----------
    secret : bytes
        The daemon's ticket secret (:func:`daemon_secret`).
    job : str
        The job's client-scoped id, as its flows go by (``"<client>:<id>"`` with keys).
    host : str
        The host whose agent takes it.
    uid : int
        The local user it lets act.
    expires_ns : int
        Wall-clock time (daemon clock, ns) after which the agent refuses it.

    Returns
    -------
    dict
        ``{"job", "host", "uid", "expires_ns", "mac"}``, ``mac`` a hex SHA-256 HMAC.
    """
    mac = _mac(host_key(secret, host), job, host, uid, expires_ns)
    return {"job": job, "host": host, "uid": int(uid), "expires_ns": int(expires_ns), "mac": mac}


def check(key: bytes | None, ticket: dict | None, *, job: str, host: str, uid: int, now_ns: int) -> None:
    """Refuse unless ``ticket`` lets local user ``uid`` name job ``job`` on host ``host`` now.

    Parameters
    ----------
    key : bytes or None
        This host's ticket key from the daemon's register reply (None: the agent
        has not registered yet).
    ticket : dict or None
        The request's ``ticket`` (already checked against
        :data:`jitsched.protocol.TICKET`'s fields), None if it has none.
    job : str
        The job the request names: the ticket's must be the same.
    host : str
        The agent's host.
    uid : int
        The requester's ``SO_PEERCRED`` uid; root (0) may use a ticket of any uid.
    now_ns : int
        The daemon's wall clock as the agent tells it, ns.

    Raises
    ------
    ProtocolError
        ``ticket_refused``, the message saying which check failed.
    """
    def refuse(why: str) -> ProtocolError:
        return ProtocolError(ErrorCode.TICKET_REFUSED, why)

    if key is None:
        raise refuse(f"the agent of {host!r} has no ticket key yet: it has not registered with the daemon "
                     "(is the daemon reachable?); try again once it has")
    if ticket is None:
        if job.startswith("/"):
            raise refuse(f"background flow {job!r} is named without a ticket: announce it with this uid "
                         "(background_started, as client.announced_flow does) for one")
        raise refuse(f"job {job!r} is named without a ticket: ask the daemon for one (attach_job with "
                     "this uid, as `jitsched attach` does)")
    if ticket["job"] != job:
        raise refuse(f"the ticket is for job {ticket['job']!r}, not {job!r}")
    if ticket["host"] != host:
        raise refuse(f"the ticket is for host {ticket['host']!r}, not this agent's {host!r}")
    if uid != 0 and ticket["uid"] != uid:
        raise refuse(f"the ticket is for uid {ticket['uid']}, not the caller's uid {uid}")
    want = _mac(key, ticket["job"], ticket["host"], ticket["uid"], ticket["expires_ns"])
    if not hmac.compare_digest(want, ticket["mac"]):
        raise refuse("the ticket's signature does not match this host's key (forged, or signed by a "
                     "daemon whose key this agent does not hold)")
    if ticket["expires_ns"] <= now_ns:
        raise refuse(f"the ticket expired {(now_ns - ticket['expires_ns']) / 1e9:.1f} s ago: ask the daemon "
                     "for a new one")


__all__ = ["KEY_BYTES", "check", "daemon_secret", "host_key", "issue"]
