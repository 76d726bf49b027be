"""FID's features (evaluation/gan.py), image folders (image_files.py), GANEvaluator and
`tianyuan fid`: the features through a random-weight FIDInception at 75 x 75 (resize_input
off, to stay fast). Comparisons with pytorch-fid run where torch, pytorch-fid and scipy are
installed. The arithmetic (distance, statistics files, IS): test_eval_fid_math.py."""
import json
import os
import re

import numpy as np
import pytest
from PIL import Image

from helpers import fid_stats as _stats
from helpers import quiet_fid as _quiet

import tianyuan as ty
from tianyuan import nn, zoo
from tianyuan.evaluation import gan
from tianyuan.evaluation.image_files import FIDWarning
from tianyuan.trainers import fid as fid_command
from tianyuan.trainers.cli import main

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def model():
    """FID's network with He-scaled random convolutions (features near 1), not resizing."""
    ty.manual_seed(0)
    net = zoo.FIDInception(resize_input=False)
    for module in net.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
    return net.eval()


# -- images and features ----------------------------------------------------------------------

def test_unit_images_conversions_and_refusals():
    grey = RNG.integers(0, 256, (2, 1, 4, 5), dtype=np.uint8)
    x = gan.unit_images(grey)
    assert x.shape == (2, 3, 4, 5) and x.dtype == np.float32
    np.testing.assert_array_equal(x[:, 2], grey[:, 0] / np.float32(255))
    np.testing.assert_allclose(gan.unit_images(np.full((1, 3, 2, 2), -0.5, np.float32),
                                               value_range=(-1, 1)), 0.25)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\].*value_range=\(-1, 1\)"):
        gan.unit_images(np.full((1, 3, 2, 2), -0.5, np.float32))
    with pytest.raises(ValueError, match="channels last"):
        gan.unit_images(np.zeros((1, 8, 8, 3), np.uint8))
    nan = np.zeros((1, 3, 2, 2), np.float32)
    nan[0, 1, 1, 0] = np.nan
    with pytest.raises(ValueError, match="1 NaN or infinite values"):
        gan.unit_images(nan)


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(5).integers(0, 256, (5, 3, 75, 75), dtype=np.uint8)


@pytest.fixture(scope="module")
def features(model, images):
    return gan.inception_features(model, images, batch_size=2, progress=False)


def test_features_in_batches_and_the_unbiased_logits(model, images, features):
    feats, logits = features
    assert feats.shape == (5, 2048) and logits.shape == (5, 1008) and feats.dtype == np.float32
    assert 0.01 < feats.std() < 100
    with ty.no_grad():
        f, biased = model.features_and_logits(ty.tensor(images[3:] / np.float32(255)))
    np.testing.assert_allclose(feats[3:], f.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logits[3:] + model.fc.bias.numpy(), biased.numpy(), rtol=1e-4,
                               atol=1e-4)
    floats = gan.inception_features(model, images[3:] / np.float32(255), progress=False)
    np.testing.assert_allclose(floats[0], feats[3:], rtol=1e-5, atol=1e-6)


def test_nan_features_are_an_error(model, images, monkeypatch):
    weight = model.Conv2d_1a_3x3.conv.weight.numpy().copy()
    weight[0, 0, 0, 0] = np.nan
    monkeypatch.setattr(model.Conv2d_1a_3x3.conv.weight, "data", weight)
    with pytest.raises(ValueError, match="2 of 2 images gave NaN"):
        gan.inception_features(model, images[:2], progress=False)


def _save(path, array_chw, mode=None):
    image = Image.fromarray(np.ascontiguousarray(array_chw.transpose(1, 2, 0)))
    (image.convert(mode) if mode else image).save(path)


def test_a_folder_reads_as_pytorch_fid_does(model, images, features, tmp_path):
    _save(tmp_path / "a.png", images[0])
    _save(tmp_path / "b.PNG", images[1])              # pytorch-fid's glob would skip it
    _save(tmp_path / "c.png", images[2], mode="L")    # grey: R = G = B
    _save(tmp_path / "d.png", images[3], mode="RGBA")   # alpha dropped
    (tmp_path / "notes.txt").write_text("not an image")
    feats, _ = gan.folder_features(tmp_path, model, batch_size=3, progress=False)
    assert len(feats) == 4
    np.testing.assert_allclose(feats[[0, 1, 3]], features[0][[0, 1, 3]], rtol=1e-5, atol=1e-6)
    grey = np.asarray(Image.open(tmp_path / "c.png").convert("RGB")).transpose(2, 0, 1)
    assert (grey[0] == grey[1]).all() and (grey[1] == grey[2]).all()
    want = gan.inception_features(model, grey[None], progress=False)[0]
    np.testing.assert_allclose(feats[2], want[0], rtol=1e-5, atol=1e-6)


def test_images_of_several_sizes_are_each_resized_from_their_own(model, images, tmp_path):
    other = np.random.default_rng(6).integers(0, 256, (3, 80, 76), dtype=np.uint8)
    _save(tmp_path / "a.png", images[0])
    _save(tmp_path / "b.png", other)
    _save(tmp_path / "c.png", images[2])
    with pytest.warns(FIDWarning, match=r"several sizes \(\(75, 75\), \(80, 76\)"):
        feats, _ = gan.folder_features(tmp_path, model, batch_size=3, progress=False)
    one = gan.inception_features(model, other[None], progress=False)[0]
    np.testing.assert_allclose(feats[1], one[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("setup, error, match", [
    (lambda p: None, ValueError, "no images"),
    (lambda p: (p / "x.png").write_bytes(b"garbage"), ValueError, "x.png: not a readable image"),
    (lambda p: (p / "file.npy").write_bytes(b""), ValueError, "no images"),
])
def test_folder_mistakes(model, tmp_path, setup, error, match):
    setup(tmp_path)
    with pytest.raises(error, match=match):
        gan.folder_features(tmp_path, model, progress=False)


# -- the evaluator ----------------------------------------------------------------------------

class _Spy:
    """Stands in for frechet_distance (its 2048-d eigen-solves are the slow part; they are
    checked above at smaller sizes): records the statistics it is given."""

    def __init__(self):
        self.calls = []

    def __call__(self, *stats):
        self.calls.append(stats)
        return 42.0


def test_gan_evaluator_scores_generated_batches(model, images, features, monkeypatch):
    real = (RNG.standard_normal(2048), np.eye(2048))
    with pytest.raises(ValueError, match=r"model=tianyuan.zoo.fid_inception_v3\(weights="):
        gan.GANEvaluator(*real)
    monkeypatch.setattr(gan, "frechet_distance", spy := _Spy())
    fake = images[:4].astype(np.float32) / 127.5 - 1         # a tanh generator's range
    evaluator = gan.GANEvaluator(*real, model, batch_size=3, splits=2)
    evaluator.reset()
    evaluator.process(None, ty.tensor(fake[:3]))
    evaluator.process(None, fake[3:])
    json.dumps(evaluator.records)
    with pytest.warns(FIDWarning, match="rank-deficient"):
        result = evaluator.evaluate()
    feats, logits = features[0][:4], features[1][:4]
    mu, sigma = _quiet(gan.statistics, feats)
    (got_mu, got_sigma, real_mu, real_sigma), = spy.calls
    np.testing.assert_allclose(got_mu, mu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_sigma, sigma, rtol=1e-3, atol=1e-5)
    assert real_mu is evaluator.mu and np.array_equal(real_sigma, real[1])
    assert result["images"] == 4 and result["fid"] == 42.0
    assert (result["is_mean"], result["is_std"]) == pytest.approx(
        gan.inception_score(logits, 2), rel=1e-4)
    evaluator.records.append({"images": 4})     # another process's records, gathered
    with pytest.raises(NotImplementedError, match="one process"):
        evaluator.evaluate()
    evaluator.reset()
    evaluator.process(None, images[:2])         # uint8 images need no range
    assert len(evaluator.features) == 1 and evaluator.records == [{"images": 2}]


# -- tianyuan fid -----------------------------------------------------------------------------

def test_fid_of_two_statistics_files(tmp_path, capsys):
    a, b = _stats(100, 32, 7), _stats(120, 32, 8)
    gan.save_statistics(tmp_path / "a.npz", *a)
    gan.save_statistics(tmp_path / "b.npz", *b)
    out = tmp_path / "fid.json"
    assert main(["fid", str(tmp_path / "a.npz"), str(tmp_path / "b.npz"), "--out",
                 str(out)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("FID:  ")
    want = gan.frechet_distance(*a, *b)
    assert float(line.split()[-1]) == pytest.approx(want, rel=1e-12)
    assert json.loads(out.read_text())["fid"] == pytest.approx(want, rel=1e-12)


def test_fid_save_stats_of_a_folder(model, images, features, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fid_command, "load_model", lambda weights: model)
    folder = tmp_path / "real"
    folder.mkdir()
    for i in range(3):
        _save(folder / f"{i}.png", images[i])
    stats = tmp_path / "real.npz"
    assert main(["fid", str(folder), str(stats), "--save-stats", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "warning: 3 images for 2048-d features: the covariance is rank-deficient" in err
    mu, sigma = gan.load_statistics(stats)
    want = _quiet(gan.statistics, features[0][:3])
    np.testing.assert_allclose(mu, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sigma, want[1], rtol=1e-3, atol=1e-6)
    assert main(["fid", str(folder), str(stats), "--save-stats"]) == 2     # no overwriting
    assert "exists" in capsys.readouterr().err
    monkeypatch.setattr(gan, "frechet_distance", spy := _Spy())
    assert main(["fid", str(folder), str(stats), "--no-progress", "--n", "2"]) == 0
    assert capsys.readouterr().out.strip().endswith("FID:  42.0")
    (mu2, _, mu1, _), = spy.calls     # the folder's first 2 images, then the file
    np.testing.assert_array_equal(mu1, mu)
    np.testing.assert_allclose(mu2, features[0][:2].astype(np.float64).mean(0), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("make, match", [
    (lambda p: [str(p / "missing"), str(p / "s.npz")], "missing: no such folder or file"),
    (lambda p: [str(p / "bad.npz"), str(p / "s.npz")], r"bad.npz: need mu \(D,\)"),
    (lambda p: [str(p / "s.npz"), str(p / "s.npz"), "--batch-size", "0"], "batch-size"),
])
def test_fid_mistakes_end_in_one_line(tmp_path, capsys, make, match):
    gan.save_statistics(tmp_path / "s.npz", *_stats(10, 4, 9))
    np.savez(tmp_path / "bad.npz", mu=np.zeros(5), sigma=np.eye(4))
    assert main(["fid"] + make(tmp_path)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 2 and re.search(match, err)


def test_fid_without_weights_offline_says_where_to_put_them(tmp_path, images, monkeypatch,
                                                             capsys):
    monkeypatch.setenv("TIANYUAN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TIANYUAN_OFFLINE", "1")
    _save(tmp_path / "a.png", images[0])
    gan.save_statistics(tmp_path / "s.npz", *_stats(10, 8, 10))
    assert main(["fid", str(tmp_path), str(tmp_path / "s.npz")]) == 2
    err = capsys.readouterr().err
    assert "pt_inception-2015-12-05-6726825d.pth" in err
    assert os.path.join("home", "weights", "torchvision") in err


def test_fid_when_the_download_fails_says_where_to_put_the_file(tmp_path, images, monkeypatch,
                                                                capsys):
    from tianyuan.weights import DownloadError, api

    def no_network(urls, *args, **kwargs):
        raise DownloadError(f"could not fetch the file:\n  {urls[0]}: failed after 5 tries")

    monkeypatch.setenv("TIANYUAN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TIANYUAN_OFFLINE", raising=False)
    monkeypatch.setattr(api, "fetch", no_network)
    _save(tmp_path / "a.png", images[0])
    assert main(["fid", str(tmp_path), str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "failed after 5 tries" in err[0]
    assert "fetch https://github.com/mseitzer/pytorch-fid/releases/download/" in err[0]
    assert os.path.join("home", "weights", "torchvision", "pt_inception-") in err[0]


# -- pytorch-fid itself (optional) ------------------------------------------------------------

def test_same_frechet_distance_as_pytorch_fid():
    fid_score = pytest.importorskip("pytorch_fid.fid_score")     # needs torch and scipy
    rng = np.random.default_rng(11)
    for n in (2500, 300):          # full rank, and rank-deficient
        f1 = np.maximum(rng.standard_normal((n, 2048)) + 0.3, 0)
        f2 = np.maximum(rng.standard_normal((n, 2048)) * 1.2 + 0.2, 0)
        a, b = _quiet(gan.statistics, f1), _quiet(gan.statistics, f2)
        want = fid_score.calculate_frechet_distance(*a, *b)
        assert gan.frechet_distance(*a, *b) == pytest.approx(want, rel=1e-3)


def test_tianyuan_fid_equals_pytorch_fid_on_two_folders(tmp_path, monkeypatch, capsys):
    """The same random weights in both (torch.save, then our converter); the same files."""
    torch = pytest.importorskip("torch")
    fid_score = pytest.importorskip("pytorch_fid.fid_score")
    inception = pytest.importorskip("pytorch_fid.inception")
    ty.manual_seed(1)
    state = {k: torch.from_numpy(v) for k, v in zoo.FIDInception().state_dict().items()
             if not k.endswith("num_batches_tracked")}
    for key, value in state.items():   # He-scaled convolutions: features near 1
        if key.endswith("conv.weight"):
            value.mul_(np.sqrt(2.0 / value[0].numel()) / 0.1)
    monkeypatch.setattr(inception, "load_state_dict_from_url", lambda *a, **k: state)
    torch.save(state, tmp_path / "fid.pth")
    rng = np.random.default_rng(12)
    folders = [tmp_path / "a", tmp_path / "b"]
    for i, folder in enumerate(folders):
        folder.mkdir()
        for j in range(10):
            _save(folder / f"{j}.png", rng.integers(0, 200 + 50 * i, (3, 64, 64), np.uint8))
    want = fid_score.calculate_fid_given_paths([str(f) for f in folders], 5, "cpu", 2048, 0)
    assert main(["fid", *map(str, folders), "--weights", str(tmp_path / "fid.pth"),
                 "--batch-size", "5", "--no-progress"]) == 0
    got = float(capsys.readouterr().out.split()[-1])
    assert got == pytest.approx(want, rel=1e-3)


def test_the_gan_task_builds_fids_inception_for_the_evaluator(model, tmp_path):
    from tianyuan.trainers.gan import GANTask
    ty.save(model.state_dict(), tmp_path / "inception.safetensors")
    gan.save_statistics(tmp_path / "real.npz", RNG.standard_normal(2048), np.eye(2048))
    task = GANTask(fid={"stats": str(tmp_path / "real.npz"), "batch": 7, "splits": 5,
                        "inception": str(tmp_path / "inception.safetensors")})
    evaluator = task.evaluator(None, None).images
    assert isinstance(evaluator, gan.GANEvaluator) and isinstance(evaluator.model,
                                                                  zoo.FIDInception)
    assert (evaluator.batch_size, evaluator.splits) == (7, 5)
    np.testing.assert_array_equal(evaluator.model.fc.weight.numpy(), model.fc.weight.numpy())
