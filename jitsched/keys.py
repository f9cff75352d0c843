"""CURVE key pairs: the key directory's layout, writing it (``jitsched keys init``) and loading it."""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from zmq.utils import z85

from jitsched.errors import JitschedError, ValidationError

# The key directory (every directory 0700, every file 0600):
#   DIR/daemon.secret             the daemon's secret key
#   DIR/hosts/<host>.secret       each host agent's secret key
#   DIR/clients/<name>.secret     each client's secret key
#   DIR/public/daemon.public      and public/hosts/, public/clients/: the public keys,
#                                 to copy to the machines that need them
# A host needs hosts/<host>.secret and public/daemon.public, a client
# clients/<name>.secret and public/daemon.public, the daemon daemon.secret and
# public/hosts/ and public/clients/ (the keys it lets in).
DAEMON = "daemon"
HOSTS = "hosts"
CLIENTS = "clients"
PUBLIC = "public"
SECRET_SUFFIX = ".secret"
PUBLIC_SUFFIX = ".public"
DEFAULT_CLIENT = "client"  # the client key `keys init` writes when no client is named
DIR_MODE = 0o700
FILE_MODE = 0o600
Z85_KEY_CHARS = 40  # a 32-byte key in Z85

# a host or client name becomes a file name: no separators, no leading dot
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,127}$")
# the ZAP domains of the daemon's two sockets: each domain lets in its own keys only
AGENT_DOMAIN = "jitsched-agents"
CLIENT_DOMAIN = "jitsched-clients"


class KeyFileError(JitschedError):
    """A key file that is missing, malformed or readable by others, or a key directory others may change."""


@dataclass(frozen=True)
class CurveKeys:
    """One CURVE client's key pair and the daemon's public key (Z85 bytes each)."""

    public: bytes
    secret: bytes = field(repr=False)  # kept out of logs and tracebacks
    server_public: bytes

    def apply(self, sock: zmq.Socket) -> None:
        """Make ``sock`` (not yet connected) a CURVE client of the daemon."""
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)


@dataclass(frozen=True)
class DaemonKeys:
    """The daemon's key pair and the public keys it lets in, each mapped to its name."""

    public: bytes
    secret: bytes = field(repr=False)
    hosts: dict[str, str]  # Z85 public key (text) -> host name
    clients: dict[str, str]  # Z85 public key (text) -> client name

    def apply(self, sock: zmq.Socket, domain: str) -> None:
        """Make ``sock`` (not yet bound) a CURVE server whose peers ZAP checks in ``domain``."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        sock.setsockopt_string(zmq.ZAP_DOMAIN, domain)


def check_name(name: str, what: str) -> str:
    """``name`` if it can name a key file, else ValidationError."""
    if not _NAME.match(name):
        raise ValidationError(f"{what} {name!r}: a key name is 1-128 letters, digits and _.@+- "
                              "(not starting with . or -)")
    return name


def secret_path(keys_dir: str | Path, kind: str, name: str = "") -> Path:
    """Where the secret key of the daemon (``kind="daemon"``), a host or a client lives."""
    d = Path(keys_dir)
    return d / f"{DAEMON}{SECRET_SUFFIX}" if kind == DAEMON else d / kind / f"{name}{SECRET_SUFFIX}"


def public_path(keys_dir: str | Path, kind: str, name: str = "") -> Path:
    """Where the public key of the daemon, a host or a client lives."""
    d = Path(keys_dir) / PUBLIC
    return d / f"{DAEMON}{PUBLIC_SUFFIX}" if kind == DAEMON else d / kind / f"{name}{PUBLIC_SUFFIX}"


def _trusted_uids() -> frozenset[int]:
    return frozenset({0, os.geteuid()})


def _untrusted(path: Path, st: os.stat_result, *, sticky_ok: bool) -> str:
    """Why another user could change what ``path`` holds ("" if none can): its owner, or
    its group/other write bits (on a directory with the sticky bit, when ``sticky_ok``,
    others may add entries but not replace ours)."""
    if st.st_uid not in _trusted_uids():
        me = "root" if os.geteuid() == 0 else f"root or uid {os.geteuid()}"
        return f"{path} is owned by uid {st.st_uid}, not {me}: its owner could replace the keys"
    writable = st.st_mode & 0o022
    if writable and not stat.S_ISLNK(st.st_mode) and not (sticky_ok and st.st_mode & stat.S_ISVTX
                                                          and stat.S_ISDIR(st.st_mode)):
        who = "group and others" if writable == 0o022 else "group" if writable & 0o020 else "others"
        return (f"{path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): "
                "they could replace the keys; chmod go-w it")
    return ""


def check_trusted(path: str | Path, *, inside: bool = True) -> None:
    """Refuse ``path`` when a user other than root and this one could change it: it, or
    any directory above it up to the root (symbolic links on the way followed, each
    link's own directory checked too), owned by another user or writable by others.

    Directories above ``path`` may be writable by others with the sticky bit (``/tmp``);
    ``path`` itself, part of a key directory when ``inside``, may not.

    Raises
    ------
    KeyFileError
        Naming the first such path and why.
    """
    lexical = Path(os.path.abspath(path))
    real = Path(os.path.realpath(lexical))
    # (path, whether others may add entries to it: above the key directory, with the sticky bit)
    checks: list[tuple[Path, bool]] = [(real, not inside)] + [(d, True) for d in real.parents]
    for q in (lexical, *lexical.parents):
        if q.is_symlink():
            # whoever may replace the link chooses where it points
            above = Path(os.path.realpath(q.parent))
            checks += [(q, True), (above, True)] + [(d, True) for d in above.parents]
    seen: set[Path] = set()
    for q, sticky_ok in checks:
        if q in seen:
            continue
        seen.add(q)
        try:
            st = os.lstat(q)
        except FileNotFoundError:
            continue  # made by this user when the keys are written
        except OSError as exc:
            raise KeyFileError(f"{q}: cannot check who may change it ({exc.strerror})") from None
        why = _untrusted(q, st, sticky_ok=sticky_ok)
        if why:
            raise KeyFileError(f"untrusted key directory: {why}")


def _check_tree(d: Path, subdirs: tuple[Path, ...]) -> None:
    """The key directory ``d`` and the directories above it, then ``subdirs`` inside it."""
    check_trusted(d)
    for sub in subdirs:
        try:
            st = os.lstat(sub)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise KeyFileError(f"{sub}: cannot check who may change it ({exc.strerror})") from None
        why = _untrusted(sub, st, sticky_ok=False)
        if why:
            raise KeyFileError(f"untrusted key directory: {why}")


def _private_dir(path: Path) -> None:
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)  # mkdir's mode passes through the umask, and the dir may exist


def _write_key(path: Path, z85: bytes) -> None:
    # O_EXCL after an unlink: the file is made here with 0600, never an old file's mode,
    # and a symlink planted at the path is replaced, not followed
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, z85 + b"\n")
    finally:
        os.close(fd)


def init_keys(keys_dir: str | Path, hosts: list[str], clients: list[str], *,
              force: bool = False, add: bool = False) -> list[Path]:
    """Write the daemon's key pair and one per host and per client; returns the files written.

    Raises
    ------
    ValidationError
        A name cannot name a key file, ``keys_dir`` is (or lies under) a file, a key
        file exists and ``force`` is false (the message lists them), or (``add``) the
        directory has no daemon key.

    With ``add`` only the hosts' and clients' pairs are written, beside the daemon's
    key pair already there: a running daemon lets in a new host's key on its first
    handshake (it reads ``public/hosts/`` again), and the host joins.
    KeyFileError
        Another user could change the directory or one above it (:func:`check_trusted`),
        or it cannot be written (the message names the path).
    """
    for h in hosts:
        check_name(h, "host")
    for c in clients:
        check_name(c, "client")
    d = Path(keys_dir)
    _check_is_directory(d)
    _check_tree(d, _subdirs(d))
    if add and not os.path.exists(secret_path(d, DAEMON)):
        raise ValidationError(f"{secret_path(d, DAEMON)}: no daemon key to add keys beside; "
                              "write the directory with `jitsched keys init DIR`")
    pairs = ([] if add else [(DAEMON, "")]) + [(HOSTS, h) for h in dict.fromkeys(hosts)] + [(CLIENTS, c) for c in dict.fromkeys(clients)]
    paths = [(secret_path(d, k, n), public_path(d, k, n)) for k, n in pairs]
    exists = [p for pair in paths for p in pair if os.path.lexists(p)]
    if exists and not force:
        shown = ", ".join(str(p) for p in exists[:5]) + (f" and {len(exists) - 5} more" if len(exists) > 5 else "")
        raise ValidationError(f"keys exist already ({shown}); pass --force to replace them")
    written = []
    try:
        for sub in (d, *_subdirs(d)):
            _private_dir(sub)
        for sec, pub in paths:
            public, secret = zmq.curve_keypair()
            _write_key(sec, secret)
            _write_key(pub, public)
            written += [sec, pub]
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else f"{d}: "
        raise KeyFileError(f"{where}cannot write the key directory ({exc.strerror})") from None
    return written


def _check_is_directory(d: Path) -> None:
    """Refuse a key directory path that is, or lies under, something other than a directory.

    The first existing path from ``d`` upwards decides: a directory is fine (those
    between are made), anything else is refused.
    """
    for q in (d, *d.parents):
        if not os.path.lexists(q):
            continue
        if os.path.isdir(q):
            return
        if q == d:
            raise ValidationError(f"{d}: not a directory (a file of that name exists); "
                                  "name a new or an existing key directory")
        raise ValidationError(f"{d}: cannot make the key directory: {q} is not a directory "
                              "(Not a directory)")


def _subdirs(d: Path) -> tuple[Path, ...]:
    return (d / HOSTS, d / CLIENTS, d / PUBLIC, d / PUBLIC / HOSTS, d / PUBLIC / CLIENTS)


def read_key(path: Path, *, secret: bool) -> bytes:
    """The Z85 key in ``path``; a secret key file must not be readable by others.

    Raises
    ------
    KeyFileError
        Missing, not one Z85 key, (secret) group- or world-accessible, or owned by
        another user than root and this one, or writable by others.
    """
    try:
        st = os.stat(path)
        text = path.read_bytes().strip()
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such key file") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read ({exc.strerror})") from None
    why = _untrusted(path, st, sticky_ok=False)
    if why:
        raise KeyFileError(f"untrusted key file: {why}")
    if secret and st.st_mode & 0o077:
        raise KeyFileError(f"{path}: secret key readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                        f"chmod 600 it")
    if len(text) != Z85_KEY_CHARS:
        raise KeyFileError(f"{path}: expected one {Z85_KEY_CHARS}-character Z85 key")
    try:
        z85.decode(text)
    except (ValueError, KeyError, TypeError):
        raise KeyFileError(f"{path}: not a Z85 key") from None
    return text


def _pair(path: Path) -> tuple[bytes, bytes]:
    secret = read_key(path, secret=True)
    return zmq.curve_public(secret), secret


def _public_keys(d: Path, kind: str) -> dict[str, str]:
    out: dict[str, str] = {}
    folder = d / PUBLIC / kind
    if not folder.is_dir():
        return out
    for p in sorted(folder.glob(f"*{PUBLIC_SUFFIX}")):
        name = p.name[: -len(PUBLIC_SUFFIX)]
        key = read_key(p, secret=False).decode()
        if key in out:
            # one key, one name: the daemon binds what a peer may do to the name
            raise KeyFileError(f"{p}: the same key as {kind}/{out[key]}")
        out[key] = name
    return out


def load_daemon_keys(keys_dir: str | Path) -> DaemonKeys:
    """The daemon's key pair and the host and client public keys it lets in.

    Raises
    ------
    KeyFileError
        A key file is missing, malformed, readable by others (secret), one
        public key stands for two names, no client key is there (no client
        could use the daemon), or another user could change the directory
        (:func:`check_trusted`).
    """
    d = Path(keys_dir)
    _check_tree(d, (d / PUBLIC, d / PUBLIC / HOSTS, d / PUBLIC / CLIENTS))
    public, secret = _pair(secret_path(d, DAEMON))
    hosts, clients = _public_keys(d, HOSTS), _public_keys(d, CLIENTS)
    both = set(hosts) & set(clients)
    if both:
        k = next(iter(both))
        raise KeyFileError(f"{d}: host {hosts[k]!r} and client {clients[k]!r} have the same key")
    if not clients:
        raise KeyFileError(f"{public_path(d, CLIENTS, '*')}: no client keys, so no client could submit "
                           "or ask for status; write one with `jitsched keys init DIR --clients NAME --force`")
    return DaemonKeys(public, secret, hosts, clients)


def host_public_keys(keys_dir: str | Path) -> dict[str, str]:
    """The hosts' public keys in a key directory (Z85 text -> host name), read again.

    Raises
    ------
    KeyFileError
        As :func:`load_daemon_keys`.
    """
    d = Path(keys_dir)
    _check_tree(d, (d / PUBLIC, d / PUBLIC / HOSTS))
    return _public_keys(d, HOSTS)


def load_curve_keys(keys_dir: str | Path, kind: str, name: str) -> CurveKeys:
    """The key pair of host or client ``name`` (``kind``: ``hosts`` or ``clients``) and the
    daemon's public key, from a key directory as ``keys init`` writes it."""
    d = Path(keys_dir)
    check_name(name, kind[:-1])
    _check_tree(d, (d / kind, d / PUBLIC))
    public, secret = _pair(secret_path(d, kind, name))
    return CurveKeys(public, secret, read_key(public_path(d, DAEMON), secret=False))


def curve_keys(keys: CurveKeys | str | Path | None, kind: str, name: str) -> CurveKeys | None:
    """``keys`` as :class:`CurveKeys`: loaded from a key directory when given as a path."""
    if keys is None or isinstance(keys, CurveKeys):
        return keys
    return load_curve_keys(keys, kind, name)


# what a CURVE client sees when the daemon refuses it (or speaks another mechanism)
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


def handshake_monitor(sock: zmq.Socket) -> zmq.Socket:
    """A monitor of ``sock``'s failed handshakes, read by :func:`handshake_failure`
    (call ``sock.disable_monitor()`` and close it before closing ``sock``)."""
    return sock.get_monitor_socket(HANDSHAKE_FAILED)


def handshake_failure(monitor: zmq.Socket | None, curve: bool) -> str:
    """Why the handshakes ``monitor`` saw failed, in words ("" if none failed)."""
    from zmq.utils.monitor import recv_monitor_message

    why = ""
    while monitor is not None:
        try:
            ev = recv_monitor_message(monitor, zmq.NOBLOCK)
        except zmq.Again:
            break
        if ev["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            why = (f"the daemon refused this key (ZAP status {ev['value']}): it is not among "
                   "the daemon's keys for this socket")
        elif ev["event"] & HANDSHAKE_FAILED:
            why = ("the handshake failed: " + ("the daemon may have other keys or none (plaintext)"
                                               if curve else "the daemon may require CURVE keys (--keys)"))
    return why


def is_local_endpoint(endpoint: str) -> bool:
    """Whether a ZeroMQ endpoint is reachable from this machine only: ``ipc://``,
    ``inproc://``, or TCP on a loopback address (or ``localhost``/``lo``)."""
    scheme, _, rest = endpoint.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = rest.rsplit(":", 1)[0]
    # a "source;address" endpoint binds the address after the semicolon
    host = host.split(";")[-1].strip("[]")
    if host in ("localhost", "lo"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "*", an interface name or a host name: may face the network


__all__ = ["AGENT_DOMAIN", "CLIENTS", "CLIENT_DOMAIN", "DAEMON", "DEFAULT_CLIENT", "DIR_MODE", "FILE_MODE",
           "HANDSHAKE_FAILED", "HOSTS", "PUBLIC", "CurveKeys", "DaemonKeys", "KeyFileError", "check_name", "check_trusted", "curve_keys", "host_public_keys", "init_keys",
           "handshake_failure", "handshake_monitor", "is_local_endpoint", "load_curve_keys", "load_daemon_keys", "public_path", "read_key",
           "secret_path"]
