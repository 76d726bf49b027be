import hashlib
import os
import socket
import subprocess
import sys

import pytest

from tianyuan.weights import ChecksumError, DownloadError, OfflineError, fetch

PAYLOAD = os.urandom(200_000)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


def test_download_completes_and_verifies(server, home):
    server.files["w.pth"] = PAYLOAD
    dest = str(home / "w.pth")
    assert fetch(server.url("w.pth"), dest, DIGEST, "full", progress=False) == dest
    assert open(dest, "rb").read() == PAYLOAD
    assert not os.path.exists(dest + ".partial")
    # cached: no second request
    fetch(server.url("w.pth"), dest, DIGEST, "full", progress=False)
    assert len(server.log) == 1


def test_prefix_checksum(server, home):
    server.files["resnet-abc.pth"] = PAYLOAD
    dest = str(home / "p.pth")
    fetch(server.url("resnet-abc.pth"), dest, DIGEST[:10], "prefix", progress=False)
    assert os.path.exists(dest)


def test_dropped_connection_resumes_where_it_stopped(server, home):
    server.files["big.pth"] = PAYLOAD
    server.drop_once.add("big.pth")
    dest = str(home / "big.pth")
    fetch(server.url("big.pth"), dest, DIGEST, "full", progress=False, backoff=0.01)
    assert open(dest, "rb").read() == PAYLOAD
    assert server.log[0] == ("big.pth", None)
    assert server.log[1] == ("big.pth", f"bytes={len(PAYLOAD) // 2}-")


def test_wrong_checksum_is_caught_and_file_removed(server, home):
    server.files["w.pth"] = PAYLOAD
    dest = str(home / "w.pth")
    with pytest.raises(ChecksumError, match="deleted the bad file") as info:
        fetch(server.url("w.pth"), dest, "0" * 64, "full", progress=False)
    assert DIGEST in str(info.value)
    assert not os.path.exists(dest) and not os.path.exists(dest + ".partial")


def test_mirrors_in_order(server, home, tmp_path):
    server.files["good.pth"] = PAYLOAD
    dest = str(home / "m.pth")
    fetch([server.url("missing.pth"), server.url("good.pth")], dest, DIGEST, progress=False,
          backoff=0.01)
    assert [p for p, _ in server.log] == ["missing.pth", "good.pth"]


def test_file_url_and_local_path(home, tmp_path):
    src = tmp_path / "local.pth"
    src.write_bytes(PAYLOAD)
    fetch(f"file://{src}", str(home / "a.pth"), DIGEST, progress=False)
    fetch(str(src), str(home / "b.pth"), DIGEST, progress=False)
    assert (home / "a.pth").read_bytes() == (home / "b.pth").read_bytes() == PAYLOAD


def test_all_sources_failing_lists_each(server, home):
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch([server.url("nope.pth")], str(home / "x.pth"), progress=False)


def test_offline_never_opens_a_socket(home, monkeypatch):
    monkeypatch.setenv("TIANYUAN_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("a socket was opened in offline mode")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    dest = str(home / "weights" / "torchvision" / "resnet18-f37072fd.pth")
    url = "https://download.pytorch.org/models/resnet18-f37072fd.pth"
    with pytest.raises(OfflineError) as info:
        fetch(url, dest, "f37072fd", "prefix", progress=False)
    assert url in str(info.value) and dest in str(info.value)


def test_offline_uses_cache_and_local_files(home, monkeypatch, tmp_path):
    monkeypatch.setenv("TIANYUAN_OFFLINE", "1")
    src = tmp_path / "local.pth"
    src.write_bytes(PAYLOAD)
    dest = str(home / "c.pth")
    fetch(["https://example.invalid/x.pth", str(src)], dest, DIGEST, progress=False)
    assert fetch("https://example.invalid/x.pth", dest, DIGEST) == dest


_CHILD = """
import sys
from tianyuan.weights import fetch
fetch(sys.argv[1], sys.argv[2], sys.argv[3], "full", progress=False)
"""


def test_two_processes_yield_one_good_file(server, home):
    server.files["shared.pth"] = PAYLOAD
    server.delay = 0.01  # ~25 chunks: the second process starts while the first downloads
    dest = str(home / "shared.pth")
    args = [sys.executable, "-c", _CHILD, server.url("shared.pth"), dest, DIGEST]
    procs = [subprocess.Popen(args, stderr=subprocess.PIPE) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    assert open(dest, "rb").read() == PAYLOAD
    assert len(server.log) == 1  # the second process waited on the lock, then found the file
    assert not os.path.exists(dest + ".partial")
