"""Tests of ``jitsched submit``'s inputs and of a multi-job workload the daemon refuses part of."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

import jitsched.client
from jitsched.cli import main
from jitsched.protocol import RemoteError

EXAMPLE = Path(__file__).resolve().parents[1] / "jitsched" / "examples" / "vgg16-4jobs.json"


class FakeClient:
    """A client whose daemon takes every job but those named in ``refuse``."""

    refuse: tuple[str, ...] = ()
    sent: list[str] = []

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def submit_job(self, job: dict) -> str:
        FakeClient.sent.append(job["id"])
        if job["id"] in self.refuse:
            raise RemoteError("invalid_job", f"job {job['id']!r}: no such host")
        return job["id"]


@pytest.fixture
def fake(monkeypatch):
    FakeClient.refuse, FakeClient.sent = (), []
    monkeypatch.setattr(jitsched.client, "Client", FakeClient)
    return FakeClient


def one_line(capsys) -> tuple[str, str]:
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return out, err.strip()


@pytest.mark.parametrize("name, content, message", [
    ("missing", None, "missing: no such file"),
    ("dir", "DIR", "dir: cannot read (Is a directory)"),
    ("list.json", "[1, 2]", "list.json: expected a job, a workload or a GraphDef (a JSON object), got list"),
    ("null.json", "null", "null.json: expected a job, a workload or a GraphDef (a JSON object), got null"),
    ("empty.json", '{"cluster": {"hosts": []}, "jobs": []}', "empty.json: the workload has no jobs to submit"),
])
def test_submit_names_what_is_wrong_with_its_file(tmp_path, capsys, fake, name, content, message):
    p = tmp_path / name
    if content == "DIR":
        p.mkdir()
    elif content is not None:
        p.write_text(content)
    assert main(["submit", str(p)]) == 2
    assert one_line(capsys)[1] == f"jitsched submit: error: {tmp_path}/{message}"
    assert fake.sent == []


def test_submit_takes_a_gzipped_workload_as_lat_does(tmp_path, capsys, fake):
    p = tmp_path / "w.json.gz"
    p.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    assert main(["lat", str(p), "--json"]) == 0
    capsys.readouterr()
    assert main(["submit", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"job_ids": [f"vgg16-{k}" for k in range(4)]}
    p.write_bytes(p.read_bytes()[:200])
    assert main(["submit", str(p)]) == 2
    assert "w.json.gz: not a valid gzip file (" in one_line(capsys)[1]


def test_a_graphdef_without_hosts_is_still_told_to_name_them(tmp_path, capsys, fake):
    g = tmp_path / "g.pbtxt"
    g.write_text('node { name: "x" op: "Const" }')
    assert main(["submit", str(g)]) == 2
    assert one_line(capsys)[1] == f"jitsched submit: error: {g}: a GraphDef needs --ps-host and --worker-host"


@pytest.mark.parametrize("as_json", [False, True])
def test_a_refused_job_of_a_workload_is_named_with_those_submitted_before_it(tmp_path, capsys, fake, as_json):
    fake.refuse = ("vgg16-2",)
    f = tmp_path / "w.json"
    shutil.copy(EXAMPLE, f)
    assert main(["submit", str(f), *(["--json"] if as_json else [])]) == 2
    out, err = one_line(capsys)
    assert fake.sent == ["vgg16-0", "vgg16-1", "vgg16-2"]
    assert err == ("jitsched submit: error: daemon refused job 'vgg16-2' (3 of 4): invalid_job: "
                   "job 'vgg16-2': no such host; submitted before it: vgg16-0, vgg16-1; not sent: 1")
    if as_json:
        assert json.loads(out) == {"job_ids": ["vgg16-0", "vgg16-1"],
                                   "failed": {"index": 2, "id": "vgg16-2",
                                              "error": "invalid_job: job 'vgg16-2': no such host"},
                                   "not_sent": 1}
    else:
        assert out == "submitted vgg16-0\nsubmitted vgg16-1\n"


def test_a_single_refused_job_says_so_in_one_line(tmp_path, capsys, fake):
    fake.refuse = ("x",)
    f = tmp_path / "j.json"
    f.write_text(json.dumps({"id": "x", "computes": [{"id": "c", "host": "h0", "duration_s": 1}]}))
    assert main(["submit", str(f)]) == 2
    out, err = one_line(capsys)
    assert out == "" and err == "jitsched submit: error: daemon refused job 'x': invalid_job: job 'x': no such host"
