"""CURVE key directories: ``jitsched keys init`` file modes and refusals, loading, local endpoints."""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from jitsched.cli import main
from jitsched.errors import ValidationError
from jitsched.keys import (
    KeyFileError,
    init_keys,
    is_local_endpoint,
    load_curve_keys,
    load_daemon_keys,
    public_path,
    secret_path,
)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_keys_init_writes_private_files_and_public_copies(tmp_path, capsys):
    d = tmp_path / "keys"
    assert main(["keys", "init", str(d), "--hosts", "h0,h1", "--clients", "alice,bob"]) == 0
    assert "5 key pairs" in capsys.readouterr().out
    dirs = [p for p in d.rglob("*") if p.is_dir()] + [d]
    files = [p for p in d.rglob("*") if p.is_file()]
    assert {mode(p) for p in dirs} == {0o700}
    assert {mode(p) for p in files} == {0o600}
    assert len(files) == 10
    assert sorted(p.name for p in (d / "public" / "hosts").iterdir()) == ["h0.public", "h1.public"]
    # every public file holds the public half of its secret file
    for kind, name in (("daemon", ""), ("hosts", "h1"), ("clients", "bob")):
        secret = secret_path(d, kind, name).read_bytes().strip()
        assert len(secret) == 40
        assert zmq.curve_public(secret) == public_path(d, kind, name).read_bytes().strip()
    keys = load_daemon_keys(d)
    assert sorted(keys.hosts.values()) == ["h0", "h1"] and sorted(keys.clients.values()) == ["alice", "bob"]
    h1 = load_curve_keys(d, "hosts", "h1")
    assert h1.server_public == keys.public and keys.hosts[h1.public.decode()] == "h1"
    assert h1.secret not in repr(h1).encode()  # secrets stay out of logs


def test_keys_init_refuses_to_overwrite_without_force(tmp_path, capsys):
    d = tmp_path / "k"
    assert main(["keys", "init", str(d), "--hosts-count", "2"]) == 0
    before = secret_path(d, "daemon").read_bytes()
    assert main(["keys", "init", str(d), "--hosts-count", "3"]) == 2
    assert "--force" in capsys.readouterr().err
    assert secret_path(d, "daemon").read_bytes() == before
    assert not secret_path(d, "hosts", "h2").exists()
    assert main(["keys", "init", str(d), "--hosts-count", "3", "--force"]) == 0
    assert secret_path(d, "daemon").read_bytes() != before
    assert mode(secret_path(d, "hosts", "h2")) == 0o600
    # the default client key
    assert secret_path(d, "clients", "client").exists()


def test_keys_init_tightens_an_existing_directory_and_checks_names(tmp_path):
    d = tmp_path / "open"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    init_keys(d, ["h0"], [])
    assert mode(d) == 0o700
    with pytest.raises(ValidationError, match="key name"):
        init_keys(tmp_path / "x", ["../evil"], [])
    assert not (tmp_path / "x").exists()


def test_a_secret_key_readable_by_others_is_refused(tmp_path):
    init_keys(tmp_path, ["h0"], ["c"])
    os.chmod(secret_path(tmp_path, "hosts", "h0"), 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_curve_keys(tmp_path, "hosts", "h0")
    with pytest.raises(KeyFileError, match="no such key file"):
        load_curve_keys(tmp_path, "hosts", "h7")


def test_one_public_key_for_two_names_is_refused(tmp_path):
    init_keys(tmp_path, ["h0", "h1"], [])
    pub = public_path(tmp_path, "hosts", "h0").read_bytes()
    public_path(tmp_path, "hosts", "h1").write_bytes(pub)
    with pytest.raises(KeyFileError, match="same key"):
        load_daemon_keys(tmp_path)


@pytest.mark.parametrize(("endpoint", "local"), [
    ("tcp://127.0.0.1:5555", True), ("tcp://127.0.0.2:*", True), ("tcp://[::1]:5", True),
    ("tcp://localhost:5", True), ("ipc:///tmp/x", True), ("inproc://x", True),
    ("tcp://*:5555", False), ("tcp://0.0.0.0:5555", False), ("tcp://10.0.0.1:5", False),
    ("tcp://eth0:5", False), ("tcp://[::]:5", False), ("tcp://example.org:5", False),
])
def test_local_endpoints(endpoint, local):
    assert is_local_endpoint(endpoint) is local
