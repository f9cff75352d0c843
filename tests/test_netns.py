"""Tests of the network-namespace helpers: entering a namespace by name, and going back."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid

import pytest

from jitsched.netns import NETNS_DIR, Namespaces, in_netns


def _ns_ino() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


@pytest.fixture
def two_namespaces(netns_available):
    names = [f"jsns{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for n in names:
        subprocess.run(["ip", "netns", "add", n], check=True)
    try:
        yield names
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], check=False)


def test_namespaces_enter_by_name_and_return_home(two_namespaces):
    a, b = two_namespaces
    home = _ns_ino()
    inos = {n: os.stat(f"{NETNS_DIR}/{n}").st_ino for n in (a, b)}
    spaces = Namespaces()
    try:
        for _ in range(2):  # the second time from the descriptors it kept
            for n in (a, b):
                with spaces.entered(n):
                    assert _ns_ino() == inos[n]
                    assert _ns_ino() != home
                assert _ns_ino() == home
        with spaces.entered(None):
            assert _ns_ino() == home
        # another running thread is not moved, and a failing body still goes home
        go, seen = threading.Event(), []
        t = threading.Thread(target=lambda: (go.wait(5.0), seen.append(_ns_ino())))
        t.start()
        with pytest.raises(RuntimeError), spaces.entered(a):
            go.set()
            t.join()
            raise RuntimeError("body failed")
        assert seen == [home]
        assert _ns_ino() == home
        # the same answers as in_netns, which opens the files each time
        with in_netns(b):
            assert _ns_ino() == inos[b]
    finally:
        spaces.close()
    # its descriptors closed: none left pointing at either namespace
    held = {os.stat(f"/proc/self/fd/{fd}").st_ino for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}
    assert not held & set(inos.values())


def test_no_test_that_builds_namespaces_runs_beside_others(request):
    # scripts/test.sh runs the tests not marked `alone` on several workers at once: every
    # test that builds namespaces is marked (tests/conftest.py), so none of them is among
    # this session's tests unless the session runs the `alone` ones too
    items = request.session.items
    unmarked = [i.nodeid for i in items
                if "netns_available" in getattr(i, "fixturenames", ()) and not i.get_closest_marker("alone")]
    assert not unmarked
    assert request.node.get_closest_marker("alone") is None
