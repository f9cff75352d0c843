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
    host_public_keys,
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


@pytest.mark.parametrize("action", ["init", "add"])
def test_keys_refuses_a_name_given_twice(tmp_path, capsys, action):
    d = tmp_path / "k"
    if action == "add":
        init_keys(d, [], ["client"])
    for flag, names, twice in (("--hosts", "a,a,b,a", "'a'"), ("--clients", "c,d,d,c", "'c', 'd'")):
        assert main(["keys", action, str(d), flag, names]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == (f"jitsched keys: error: {flag}: {twice} named more than once; "
                                     "each name gets one key pair\n")
    assert not (d / "hosts").exists() or not any((d / "hosts").iterdir())


@pytest.mark.parametrize("action", ["init", "add"])
def test_keys_refuses_a_file_where_the_directory_goes_in_words(tmp_path, capsys, action):
    f = tmp_path / "file"
    f.write_text("not keys\n")
    assert main(["keys", action, str(f), "--hosts", "h0"]) == 2
    assert capsys.readouterr().err == (f"jitsched keys: error: {f}: not a directory (a file of that "
                                       "name exists); name a new or an existing key directory\n")
    assert main(["keys", action, str(f / "sub" / "k"), "--hosts", "h0"]) == 2
    assert capsys.readouterr().err == (f"jitsched keys: error: {f / 'sub' / 'k'}: cannot make the key "
                                       f"directory: {f} is not a directory (Not a directory)\n")
    assert f.read_text() == "not keys\n"


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


# Another user: the tests run as root, so any uid but 0 is one (65534: nobody).
OTHER_UID = 65534


def _refused(capsys, argv: list[str], path) -> str:
    """Run ``jitsched argv``: exit 2 and one line on stderr naming ``path``; returns the line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path} is " in err, err
    return err


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_keys_init_refuses_a_directory_another_user_owns_or_may_write(tmp_path, capsys):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, -1)
    # the key directory itself, and a directory above it
    assert "owned by uid 65534" in _refused(capsys, ["keys", "init", str(theirs)], theirs)
    assert not (theirs / "daemon.secret").exists()
    _refused(capsys, ["keys", "init", str(theirs / "sub" / "keys")], theirs)
    assert not (theirs / "sub").exists()
    for m in (0o777, 0o770, 0o1777):  # group- or world-writable; the sticky bit does not
        d = tmp_path / f"open{m:o}"  # make the key directory itself safe: others add public keys
        d.mkdir()
        os.chmod(d, m)
        assert "writable by" in _refused(capsys, ["keys", "init", str(d)], d)
        assert list(d.iterdir()) == []
    # above the key directory a sticky, world-writable directory (/tmp) is fine
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    assert main(["keys", "init", str(sticky / "k")]) == 0
    capsys.readouterr()
    # without the sticky bit anyone may rename the key directory away and put theirs in its place
    os.chmod(sticky, 0o777)
    _refused(capsys, ["keys", "init", str(sticky / "k"), "--force"], sticky)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_symlink_another_user_owns_on_the_way_is_refused(tmp_path, capsys):
    real = tmp_path / "real"
    init_keys(real, ["h0"], ["c"])
    sticky = tmp_path / "shared"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    link = sticky / "keys"
    link.symlink_to(real)
    load_daemon_keys(link)  # a link this user owns: its target is checked, and is fine
    os.lchown(link, OTHER_UID, -1)  # whoever owns the link may point it elsewhere
    with pytest.raises(KeyFileError, match=f"{link} is owned by uid {OTHER_UID}"):
        load_daemon_keys(link)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("victim", [".", "public", "public/clients", "public/hosts", "clients",
                                    "public/daemon.public", "daemon.secret", "clients/c.secret"])
def test_daemon_agents_and_clients_refuse_keys_another_user_could_swap(tmp_path, victim):
    d = tmp_path / "keys"
    init_keys(d, ["h0"], ["c"])
    path = d / victim if victim != "." else d
    os.chown(path, OTHER_UID, -1)
    users = {"daemon": lambda: load_daemon_keys(d), "client": lambda: load_curve_keys(d, "clients", "c")}
    # the daemon reads neither clients/ nor its own public key; a client reads none of
    # public/hosts, public/clients and the daemon's secret
    skip = {"daemon": ("clients", "clients/c.secret", "public/daemon.public"),
            "client": ("public/hosts", "daemon.secret", "public/clients")}
    for who, load in users.items():
        if victim in skip[who]:
            load()
            continue
        with pytest.raises(KeyFileError, match=f"{path} is owned by uid {OTHER_UID}"):
            load()
    os.chown(path, 0, -1)
    if path.is_dir():
        os.chmod(path, 0o777)
        with pytest.raises(KeyFileError, match=f"{path} is writable by group and others"):
            (load_curve_keys(d, "clients", "c") if victim == "clients" else load_daemon_keys(d))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_agent_and_daemon_commands_refuse_an_untrusted_key_directory(tmp_path, capsys):
    d = tmp_path / "keys"
    init_keys(d, ["h0"], ["c"])
    os.chmod(tmp_path, 0o777)
    try:
        _refused(capsys, ["agent", "--host", "h0", "--keys", str(d), "--daemon", "tcp://127.0.0.1:1",
                          "--local-dir", str(tmp_path / "run")], tmp_path)
        _refused(capsys, ["status", "--keys", str(d), "--key-name", "c", "--daemon", "tcp://127.0.0.1:1"],
                 tmp_path)
        cfg = tmp_path / "c.toml"
        cfg.write_text('[[hosts]]\nname = "h0"\negress_bps = 1e9\ningress_bps = 1e9\n'
                       '[daemon]\njob_endpoint = "tcp://127.0.0.1:0"\nagent_endpoint = "tcp://127.0.0.1:0"\n')
        _refused(capsys, ["daemon", "--quiet", "--config", str(cfg), "--keys", str(d)], tmp_path)
    finally:
        os.chmod(tmp_path, 0o700)


def test_a_key_directory_without_client_keys_is_refused(tmp_path, capsys):
    init_keys(tmp_path / "k", ["h0"], [])
    with pytest.raises(KeyFileError, match="no client keys"):
        load_daemon_keys(tmp_path / "k")
    assert main(["keys", "init", str(tmp_path / "k2"), "--clients", " , "]) == 2
    assert "--clients: no client names" in capsys.readouterr().err
    assert not (tmp_path / "k2").exists()


def test_keys_add_writes_the_new_names_pairs_beside_the_daemons_key(tmp_path, capsys):
    d = tmp_path / "keys"
    assert main(["keys", "init", str(d), "--hosts", "h0"]) == 0
    daemon_key = (d / "daemon.secret").read_bytes()
    assert main(["keys", "add", str(d), "--hosts", "h9", "--clients", "carol"]) == 0
    assert "added 2 key pairs" in capsys.readouterr().out
    assert (d / "daemon.secret").read_bytes() == daemon_key  # the daemon's key stays
    for p in ("hosts/h9.secret", "public/hosts/h9.public", "clients/carol.secret", "public/clients/carol.public"):
        assert stat.S_IMODE((d / p).stat().st_mode) == 0o600, p
    assert set(host_public_keys(d).values()) == {"h0", "h9"}
