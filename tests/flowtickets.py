"""Tickets for tests that register flows with an agent directly (no runner)."""

from __future__ import annotations

import os
import time

from jitsched import tickets

# the secret of tests whose agent has met no daemon: the helper gives the agent its host key
TEST_SECRET = b"jitsched tests' ticket secret...."


def flow_ticket(agent, flow: str, *, uid: int | None = None, secret: bytes | None = None) -> dict:
    """A ticket for ``flow``'s job (its part before the last ``/``) on ``agent``'s host.

    Parameters
    ----------
    agent : jitsched.agents.agent.Agent
        The agent that checks it. One without a ticket key (no daemon) is given
        :data:`TEST_SECRET`'s key for its host.
    flow : str
        ``"<job>/<transfer>"``.
    uid : int, optional
        The local user it lets register (default: this process's).
    secret : bytes, optional
        The daemon's secret (``daemon.state.ticket_secret``) when the agent has the
        daemon's key; default :data:`TEST_SECRET`.

    Returns
    -------
    dict
        A ticket valid for an hour.
    """
    if secret is None:
        secret = TEST_SECRET
        if agent.ticket_key is None:
            agent.ticket_key = tickets.host_key(secret, agent.host)
    job = flow.rpartition("/")[0]
    return tickets.issue(secret, job, agent.host, os.geteuid() if uid is None else uid,
                         time.time_ns() + 3600 * 10**9)
