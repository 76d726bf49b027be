"""Manifest lookups, load_weights by name through a local server, and the CLI."""
import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pth_writer import contiguous, write_zip
from tianyuan.trainers.cli import main
from tianyuan.weights import (default_entry, get_entry, list_entries, load_weights, register,
                              unregister)
from zoo_specs import random_state


def test_manifest_entries_are_complete():
    entries = list_entries()
    names = {e.name for e in entries}
    for entry in entries:
        assert entry.urls and entry.arch and entry.format in ("torchvision", "megengine")
        assert entry.sha256_kind in ("full", "prefix", "none")
        if entry.sha256_kind == "prefix":  # the prefix is the hex after the last hyphen
            assert entry.file_name.rsplit("-", 1)[1].startswith(entry.sha256)
        else:
            assert entry.sha256 is None
        # ImageNet classifiers at 224 (Inception-v3 at 299; FID's Inception, detectors: no
        # crop, no top-1); pose models' person crops at 256x192
        assert entry.preprocessing["crop"] in (224, 299, None, [256, 192])
        assert entry.metrics.get("top1", 100) > 50 and (entry.metrics or "fid" in entry.arch)
        assert entry.float_parent is None or entry.float_parent in names
    r50 = get_entry("resnet50.imagenet_torchvision")
    assert r50.urls[0] == "https://download.pytorch.org/models/resnet50-0676ba61.pth"
    assert r50.metrics == {"top1": 76.130, "top5": 92.862}
    assert get_entry("shufflenet_v2_x0_5.imagenet_torchvision").sha256 == "f707e7126e"
    assert default_entry("resnet18").name == "resnet18.imagenet_torchvision"


def test_unknown_name_suggests_others():
    with pytest.raises(KeyError, match="resnet50.imagenet_torchvision"):
        get_entry("resnet50.nope")


def test_weights_never_import_zoo_or_torch():
    code = ("import sys, tianyuan.weights, tianyuan.weights.cli; "
            "print([m for m in sys.modules "
            "if m.startswith(('tianyuan.zoo', 'torch', 'megengine'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture
def served_entry(server, home, tmp_path):
    """A registered manifest entry whose file is a resnet18 .pth on the local server."""
    state = random_state("resnet18", seed=5)
    path = tmp_path / "resnet18-test.pth"
    write_zip(path, {k: contiguous(str(i), v) for i, (k, v) in enumerate(state.items())})
    data = path.read_bytes()
    server.files["resnet18-test.pth"] = data
    base = get_entry("resnet18.imagenet_torchvision")
    entry = dataclasses.replace(base, name="resnet18.test_local",
                                urls=(server.url("resnet18-test.pth"),),
                                sha256=hashlib.sha256(data).hexdigest(), sha256_kind="full")
    register(entry)
    yield entry, state
    unregister(entry.name)


def test_load_weights_by_name_downloads_and_converts(served_entry):
    entry, state = served_entry
    out = load_weights(entry.name, arch="resnet18", progress=False)
    for name in state:
        np.testing.assert_array_equal(out[name], state[name])
    with pytest.raises(ValueError, match="is for resnet18"):
        load_weights(entry.name, arch="resnet50")


def _run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr()


def test_cli_list_download_verify(served_entry, capsys, home):
    entry, _ = served_entry
    code, out = _run(capsys, "weights", "list", "--json")
    rows = {r["name"]: r for r in json.loads(out.out)}
    assert code == 0 and rows[entry.name]["cached"] is False
    assert rows["resnet50.imagenet_torchvision"]["top1"] == 76.13
    code, out = _run(capsys, "weights", "list")
    assert "name" in out.out.splitlines()[0] and "resnet50.imagenet_torchvision" in out.out
    code, out = _run(capsys, "weights", "download", entry.name, "--json")
    assert code == 0 and json.loads(out.out)[0]["status"] == "ok"
    code, out = _run(capsys, "weights", "verify", "--json")
    assert code == 0 and json.loads(out.out) == [
        {"name": entry.name, "status": "ok", "sha256": entry.sha256, "expected": entry.sha256,
         "path": str(home / "weights" / "torchvision" / "resnet18-test.pth")}]
    # corrupt the cached file: verify says so and fails
    cached = home / "weights" / "torchvision" / "resnet18-test.pth"
    cached.write_bytes(b"garbage")
    code, out = _run(capsys, "weights", "verify", entry.name)
    assert code == 1 and "mismatch" in out.out


def test_cli_download_failure_exit_status(server, home, capsys):
    base = get_entry("resnet18.imagenet_torchvision")
    register(dataclasses.replace(base, name="resnet18.missing", urls=(server.url("x.pth"),)))
    try:
        code, out = _run(capsys, "weights", "download", "resnet18.missing")
        assert code == 1 and "HTTP 404" in out.out
    finally:
        unregister("resnet18.missing")


def test_cli_offline_download_says_where(home, capsys, monkeypatch):
    monkeypatch.setenv("TIANYUAN_OFFLINE", "1")
    code, out = _run(capsys, "weights", "download", "resnet50.imagenet_torchvision", "--json")
    row = json.loads(out.out)[0]
    assert code == 1 and "resnet50-0676ba61.pth" in row["error"]
    assert str(home / "weights" / "torchvision" / "resnet50-0676ba61.pth") in row["error"]


def test_cli_import(tmp_path, capsys):
    import tianyuan
    state = random_state("mobilenet_v2", seed=2)
    legacy = {k: contiguous(str(i), v) for i, (k, v) in enumerate(state.items())
              if not k.endswith("num_batches_tracked")}
    src = tmp_path / "mobilenet_v2-b0353104.pth"
    write_zip(src, legacy)
    out_path = tmp_path / "mb.safetensors"
    code, out = _run(capsys, "weights", "import", str(src), "--arch", "mobilenet_v2",
                     "--format", "torchvision", "--out", str(out_path))
    assert code == 0 and "mb.safetensors" in out.out
    saved = tianyuan.load(out_path)
    assert set(saved) == set(state)
    np.testing.assert_array_equal(saved["features.18.0.weight"], state["features.18.0.weight"])
    # the safetensors file loads back through load_weights as "ours"
    again = load_weights(out_path, arch="mobilenet_v2")
    np.testing.assert_array_equal(again["classifier.1.bias"], state["classifier.1.bias"])
    code, out = _run(capsys, "weights", "import", str(src), "--arch", "resnet18",
                     "--out", str(tmp_path / "bad.safetensors"))
    assert code == 2 and "missing keys" in out.err


def test_cli_dispatcher(capsys):
    code, out = _run(capsys)
    assert code == 0 and "weights" in out.out
    code, out = _run(capsys, "frobnicate")
    assert code == 2 and "unknown command" in out.err


def test_console_script_runs():
    exe = os.path.join(os.path.dirname(sys.executable), "tianyuan")
    if not os.path.exists(exe):
        pytest.skip("the tianyuan console script is not installed next to this python")
    out = subprocess.run([exe, "weights", "list", "--arch", "resnet18"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "resnet18.imagenet_torchvision" in out.stdout


def test_cli_download_without_network_leaves_no_lock_and_a_narrow_table(home, capsys,
                                                                        monkeypatch):
    import urllib.error
    import urllib.request


    def no_network(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setattr("time.sleep", lambda seconds: None)     # the retries' back-off
    code, out = _run(capsys, "weights", "download", "resnet18.imagenet_torchvision")
    lines = out.out.splitlines()
    assert code == 1 and "failed after 5 tries" in out.out and "name resolution" in out.out
    assert lines[2].split() == ["resnet18.imagenet_torchvision", "failed", "-", "could", "not",
                                "fetch", "resnet18-f37072fd.pth:"]
    assert max(len(line) for line in lines) < 150, lines      # the header is not padded
    assert not [p for p in home.rglob("*") if p.suffix in (".lock", ".partial")]
    code, out = _run(capsys, "weights", "download", "resnet18.imagenet_torchvision", "--json")
    assert "\n" in json.loads(out.out)[0]["error"]             # the JSON keeps every line


def test_cli_list_json_has_urls_and_the_table_cached_size(served_entry, capsys, home):
    entry, _ = served_entry
    code, out = _run(capsys, "weights", "list", "--json")
    row = {r["name"]: r for r in json.loads(out.out)}[entry.name]
    assert row["urls"] == list(entry.urls) and row["cached_mb"] is None
    assert row["path"] == str(home / "weights" / "torchvision" / "resnet18-test.pth")
    assert _run(capsys, "weights", "download", entry.name)[0] == 0
    code, out = _run(capsys, "weights", "list", "--json")
    row = {r["name"]: r for r in json.loads(out.out)}[entry.name]
    assert row["cached"] and row["cached_mb"] == round(os.path.getsize(row["path"]) / 1e6, 1)
    assert row["cached_mb"] > 0
    text = _run(capsys, "weights", "list")[1].out
    assert "cached_mb" in text.splitlines()[0] and "urls" not in text
