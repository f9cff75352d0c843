"""One daemon replica among several on etcd: a follower answering ``not_leader`` until it is elected, then the daemon."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import zmq
from zmq.auth.thread import ThreadAuthenticator

from jitsched.config import DaemonConfig
from jitsched.daemon.ha import Election, Etcd, EtcdStore, Leader
from jitsched.daemon.metrics import FollowerMetrics
from jitsched.daemon.server import Daemon, KnownKeys, bind_error
from jitsched.daemon.solver import describe
from jitsched.daemon.store import StoreError
from jitsched.errors import ProtocolError
from jitsched.keys import AGENT_DOMAIN, CLIENT_DOMAIN, load_daemon_keys
from jitsched.policies.base import Policy
from jitsched.protocol import (
    FOLLOWER,
    LEADER,
    ErrorCode,
    MsgType,
    decode_request,
    encode_error,
    encode_ok,
    not_leader_message,
    peek_id,
)

log = logging.getLogger("jitsched.daemon.replica")


class Follower:
    """The sockets of a replica that does not lead: every request on the job and agent
    endpoints gets ``not_leader`` naming the leader (or saying none is elected yet), but a
    ``status`` asking for the ``replica`` gets this replica's own (:meth:`status`).

    With keys the sockets are CURVE servers letting in the same keys as the daemon's. With
    ``metrics_port`` the follower's gauges are served there until it closes.
    """

    def __init__(self, config: DaemonConfig, leaderships: int = 0, lead_failures: int = 0,
                 last_lead_failure: str = "") -> None:
        self.ctx = zmq.Context()
        self.metrics = FollowerMetrics()
        self.metrics.leaderships.set(leaderships)
        self.metrics.lead_failures.set(lead_failures)
        self.leaderships = leaderships
        # leaderships that ended on a failure of this replica's own (its daemon died, or its
        # state could not be read), and the last one's error
        self.lead_failures = lead_failures
        self.last_lead_failure = last_lead_failure
        self.etcd_error = ""  # why etcd did not answer the replica's last look ("" if it did; serve's)
        self._auth: ThreadAuthenticator | None = None
        self.socks: list[zmq.Socket] = []
        keys = load_daemon_keys(config.keys_dir) if config.keys_dir else None
        if keys is not None:
            self._auth = ThreadAuthenticator(self.ctx, log=logging.getLogger("jitsched.daemon.zap"))
            self._auth.start()
            self._auth.configure_curve_callback(AGENT_DOMAIN, credentials_provider=KnownKeys(keys.hosts, AGENT_DOMAIN))
            self._auth.configure_curve_callback(CLIENT_DOMAIN,
                                                credentials_provider=KnownKeys(keys.clients, CLIENT_DOMAIN))
        try:
            for name, domain in (("job_endpoint", CLIENT_DOMAIN), ("agent_endpoint", AGENT_DOMAIN)):
                s = self.ctx.socket(zmq.ROUTER)
                s.setsockopt(zmq.LINGER, 0)
                self.socks.append(s)
                if keys is not None:
                    keys.apply(s, domain)
                try:
                    s.bind(getattr(config, name))
                except zmq.ZMQError as exc:
                    raise bind_error(name, getattr(config, name), exc) from None
            if config.metrics_port:
                self.metrics.serve(config.metrics_port, config.metrics_address)
        except BaseException:
            self.close()
            raise
        self.answered = 0  # requests answered not_leader

    def status(self, leader: Leader | None) -> dict:
        """This replica's answer to a ``status`` asking for the ``replica``: its role, the
        leader it sees (None: none elected, or etcd unreachable: ``etcd_error`` says why)."""
        return {"role": FOLLOWER, "epoch": leader.epoch if leader else 0,
                "leader": {"job_endpoint": leader.job_endpoint, "agent_endpoint": leader.agent_endpoint,
                           "epoch": leader.epoch} if leader else None,
                "etcd_error": self.etcd_error, "leaderships": self.leaderships,
                "lead_failures": self.lead_failures, "last_lead_failure": self.last_lead_failure,
                "not_leader_answers": self.answered}

    def serve(self, timeout_s: float, leader: Leader | None, etcd_error: str = "") -> None:
        """Answer what arrives within ``timeout_s``: ``not_leader`` naming ``leader``, which the
        replica read from etcd (``etcd_error``: why it could not, "" if it could)."""
        self.etcd_error = etcd_error
        poller = zmq.Poller()
        for s in self.socks:
            poller.register(s, zmq.POLLIN)
        msg = not_leader_message(*((leader.job_endpoint, leader.agent_endpoint, leader.epoch) if leader else ()))
        self.metrics.etcd_up.set(0 if self.etcd_error else 1)
        for s, _ in poller.poll(int(timeout_s * 1000)):
            for _ in range(1000):
                try:
                    frames = s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if len(frames) < 2:
                    continue
                reply = self._own_status(frames[-1], leader)
                try:
                    if reply is None:
                        reply = encode_error(peek_id(frames[-1]), ErrorCode.NOT_LEADER, msg)
                        self.answered += 1
                    s.send_multipart([frames[0], reply], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass  # the peer went: it asks again elsewhere
        self.metrics.not_leader.set(self.answered)

    def _own_status(self, data: bytes, leader: Leader | None) -> bytes | None:
        """The reply to a ``status`` asking for the ``replica``; None for anything else."""
        if len(data) > 4096:  # a status request is a few dozen bytes
            return None
        try:
            req = decode_request(data, max_bytes=4096)
        except ProtocolError:
            return None
        if req.type != MsgType.STATUS or not req.body.get("replica"):
            return None
        return encode_ok(req.id, self.status(leader))

    def close(self) -> None:
        """Close the sockets and the metrics endpoint (their ports are free again) and the key handler."""
        self.metrics.shutdown()
        for s in self.socks:
            s.close(0)
        if self._auth is not None:
            self._auth.stop()
        self.ctx.term()


class Replica:
    """A daemon replica: follows until elected, then runs :class:`Daemon` on the etcd store
    (jobs resumed from it) with its epoch, until stopped or deposed, then follows again.

    Parameters
    ----------
    config : DaemonConfig
        With ``etcd_endpoints``; the job and agent endpoints are served in both roles.
    policy : callable, optional
        Makes the policy of each leadership (default: the config's).

    ``role`` is ``follower`` or ``leader``; ``daemon`` the running daemon while
    leading; ``leaderships`` how many times this replica was elected; ``lead_failures``
    how many of them ended on a failure of its own (its daemon stopped on an error, its
    state could not be read), ``last_lead_failure`` the last one's error. Such a leader
    resigns at once, so another replica takes over without waiting out the lease, and does
    not campaign for one lease; the failures show in the follower's ``status`` and metrics.
    """

    def __init__(self, config: DaemonConfig, policy: Callable[[], Policy] | None = None) -> None:
        if not config.etcd_endpoints:
            raise ValueError("a replica needs [ha] etcd_endpoints")
        self.config = config
        self.policy = policy
        self.etcd = Etcd(list(config.etcd_endpoints))
        self.election = Election(self.etcd, config.etcd_prefix, config.lease_ttl_s)
        self.role = FOLLOWER
        self.daemon: Daemon | None = None
        self.leaderships = 0
        self.lead_failures = 0
        self.last_lead_failure = ""
        self._campaign_after = 0.0  # monotonic time before which it does not campaign
        self.failure: BaseException | None = None
        self.etcd_error = ""  # why etcd did not answer the follower's last look ("" if it did)
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Replica:
        """Run in a background thread (its sockets bound as a follower first)."""
        follower = self._follower()  # a bind error is the caller's, at once
        self._thread = threading.Thread(target=self.run, args=(follower,), name="jitsched-replica", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop (a leader resigns: a follower takes over at once, not a lease later)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        """Whether the replica's thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def wait_role(self, role: str, timeout_s: float) -> bool:
        """Wait until the replica is in ``role``; whether it is."""
        deadline = time.monotonic() + timeout_s
        while self.role != role and time.monotonic() < deadline:
            self._changed.wait(0.05)
            self._changed.clear()
        return self.role == role

    def run(self, follower: Follower | None = None) -> None:
        """Follow and lead in turn until :meth:`stop` (blocks)."""
        try:
            while not self._stop.is_set():
                if self._follow(follower or self._follower()):
                    self._lead()
                follower = None
        except BaseException as exc:
            self.failure = exc
            log.critical("event=replica_died error=%r", f"{type(exc).__name__}: {exc}", exc_info=exc)

    def _follower(self) -> Follower:
        return Follower(self.config, self.leaderships, self.lead_failures, self.last_lead_failure)

    def _failed_to_lead(self, epoch: int, error: str) -> None:
        """Count a leadership ended by a failure of this replica's own and give it up at once."""
        self.lead_failures += 1
        self.last_lead_failure = error
        # the other replicas campaign first: for one lease it only follows
        self._campaign_after = time.monotonic() + self.election.ttl_s
        log.error("event=replica_lead_failed epoch=%d error=%r", epoch, error)
        try:
            self.election.resign()
        except StoreError as exc:  # the lease then runs out by itself
            log.warning("event=replica_resign_failed epoch=%d error=%r", epoch, str(exc))
            self.election.depose("resigning failed")

    def _follow(self, follower: Follower) -> bool:
        """Answer ``not_leader`` until elected (True) or stopped (False)."""
        cfg = self.config
        leader: Leader | None = None
        try:
            while not self._stop.is_set():
                try:
                    leader = self.election.leader()
                    self.etcd_error = ""
                    if (leader is None and time.monotonic() >= self._campaign_after
                            and self.election.campaign(cfg.job_endpoint, cfg.agent_endpoint)):
                        return True
                except StoreError as exc:
                    if not self.etcd_error:  # once per outage, not every campaign_s
                        log.warning("event=replica_etcd_unavailable error=%r", str(exc))
                    self.etcd_error = str(exc)
                    leader = None
                follower.serve(cfg.campaign_s, leader, self.etcd_error)
            return False
        finally:
            follower.close()

    def _lead(self) -> None:
        """Serve as the daemon until deposed or stopped."""
        me = self.election.me
        assert me is not None
        self.leaderships += 1
        t0 = time.monotonic()
        # reading and restoring a large state, and binding, may take longer than the lease:
        # keep renewing it meanwhile, or the lease lapses before the loop below first renews
        loaded = threading.Event()

        def keep_lease() -> None:
            while not loaded.wait(self.election.ttl_s / 4):
                if not self.election.renew():
                    return

        renewer = threading.Thread(target=keep_lease, name="jitsched-replica-renew", daemon=True)
        renewer.start()
        try:
            try:
                store = EtcdStore(self.etcd, self.election)
                d = Daemon(self.config, self.policy() if self.policy else None, store=store, epoch=me.epoch,
                           leading=self.election.leading)
            except StoreError as exc:
                self._failed_to_lead(me.epoch, f"{type(exc).__name__}: {exc}")
                return
            try:
                d.start()
            except BaseException:
                d.stop()
                self.election.resign()
                raise
        finally:
            loaded.set()
            renewer.join()
        self.daemon, self.role = d, LEADER
        self._changed.set()
        log.warning("event=replica_leading epoch=%d resumed=%d load_s=%.3f", me.epoch, len(d.state.restored),
                    time.monotonic() - t0)
        try:
            while not self._stop.wait(self.election.ttl_s / 4):
                if not self.election.renew() or not d.running:
                    break
        finally:
            if self._stop.is_set():
                self.election.resign()
            elif d.failure is not None:
                self._failed_to_lead(me.epoch, f"the daemon stopped: {describe(d.failure)}")
            else:
                self.election.depose("lost the lease")
            d.stop()
            self.daemon, self.role = None, FOLLOWER
            self._changed.set()


__all__ = ["FOLLOWER", "LEADER", "Follower", "Replica"]
