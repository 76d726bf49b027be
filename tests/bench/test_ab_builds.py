"""bench/ab_builds.py: the site it lays out imports the checkout it names, its layer choice,
environments and ratios, and one round end to end on this checkout against itself."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))
import ab_builds  # noqa: E402


def test_the_site_imports_the_checkout_it_names(tmp_path):
    site = ab_builds.make_site(REPO, str(tmp_path / "site"))
    probe = ("import tianyuan, tianyuan.zoo, os; print(os.path.realpath(tianyuan.__file__)); "
             "print(os.path.realpath(tianyuan.zoo.__file__))")
    out = subprocess.run([sys.executable, "-c", probe], env=dict(os.environ, PYTHONPATH=site),
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [os.path.join(REPO, "framework", "__init__.py"),
                   os.path.join(REPO, "zoo", "__init__.py")]
    # from the site itself, not from an editable install's finder that could stand in
    for name in ("zoo", "datasets", "weights", "evaluation", "trainers"):
        assert os.path.realpath(os.path.join(site, "tianyuan", name)) == os.path.join(REPO, name)


def test_a_folder_that_is_no_built_checkout_is_refused_by_name(tmp_path):
    with pytest.raises(SystemExit, match="not a checkout of tianyuan"):
        ab_builds.make_site(str(tmp_path), str(tmp_path / "site"))
    (tmp_path / "framework").mkdir()
    (tmp_path / "setup.py").write_text('ROOTS = {"tianyuan": "framework"}\n')
    with pytest.raises(SystemExit, match=f"{tmp_path} has no native extension built"):
        ab_builds.make_site(str(tmp_path), str(tmp_path / "site"))


def test_layers_by_name_and_prefix():
    layers = [(name, None, None) for name in ("conv1", "layer1.0.conv1", "layer1.0.conv2",
                                              "layer2.0.conv1")]
    assert ab_builds.select(layers, "all") == layers
    assert [n for n, _, _ in ab_builds.select(layers, "conv1,layer1*")] == [
        "conv1", "layer1.0.conv1", "layer1.0.conv2"]
    with pytest.raises(SystemExit, match="matches none of conv1, layer1.0.conv1"):
        ab_builds.select(layers, "layer3*")


def test_environments():
    assert ab_builds.parse_env("A=1,B=x=y", "--env-b") == {"A": "1", "B": "x=y"}
    assert ab_builds.parse_env(None, "--env-a") == {}
    with pytest.raises(SystemExit, match="--env-b wants K=V"):
        ab_builds.parse_env("A", "--env-b")


def test_ratios_are_b_over_a_per_round_then_the_median_and_range():
    a = [{"x": [1.0, 9], "y": [2.0, 9]}, {"x": [2.0, 9], "y": [2.0, 9]},
         {"x": [1.0, 9], "y": [1.0, 9]}]
    b = [{"x": [1.1, 18], "y": [2.0, 9]}, {"x": [1.0, 27], "y": [2.0, 9]},
         {"x": [1.2, 9], "y": [1.0, 9]}]
    rows = ab_builds.compare(a, b)
    assert rows["x"]["ratio"] == pytest.approx(1.1)  # of 1.1, 0.5, 1.2 (minima, not medians)
    assert (rows["x"]["low"], rows["x"]["high"]) == pytest.approx((0.5, 1.2))
    assert rows["x"]["a_ms"] == pytest.approx(1.0) and rows["x"]["b_ms"] == pytest.approx(1.1)
    # the total: each round's sums, 3.1 / 3, 3 / 4, 2.2 / 2
    assert rows["total"]["ratio"] == pytest.approx(3.1 / 3)
    assert (rows["total"]["low"], rows["total"]["high"]) == pytest.approx((0.75, 1.1))
    # --stat median: the second of each layer's pair (2, 3, 1 for x)
    assert ab_builds.compare(a, b, 1)["x"]["ratio"] == pytest.approx(2)


def test_one_round_of_this_checkout_against_itself(tmp_path):
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "ab_builds.py"), REPO, REPO,
         "--env-b", "TIANYUAN_AB_PROBE=1", "--layers", "layer4.1.conv2", "--batch", "1",
         "--rounds", "1", "--calls", "1", "--threads", "1", "--json",
         str(tmp_path / "ab.json")], capture_output=True, text=True, check=True).stdout
    assert "layer4.1.conv2" in out and "total" in out
    result = json.loads((tmp_path / "ab.json").read_text())
    assert len(result["a"]) == len(result["b"]) == 1
    assert list(result["a"][0]) == ["layer4.1.conv2"]
    assert result["ratios"]["total"]["ratio"] > 0


def test_a_side_that_fails_is_named_with_its_environment():
    # side B's environment reaches its process: an ISA the library refuses at import
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "ab_builds.py"), REPO, REPO,
         "--env-b", "TIANYUAN_ISA=bogus", "--layers", "layer4.1.conv2", "--batch", "1",
         "--rounds", "1", "--calls", "1"], capture_output=True, text=True)
    assert done.returncode != 0
    assert f"the side of {REPO} (environment {{'TIANYUAN_ISA': 'bogus'}}) failed" in done.stderr
    assert "TIANYUAN_ISA=bogus" in done.stderr
