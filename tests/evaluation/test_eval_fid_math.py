"""FID's and IS's arithmetic (evaluation/gan.py): the Frechet distance against its definition
through a general eigen-solver and closed forms, pytorch-fid's statistics files, IS against
the original code's formula. The features and `tianyuan fid`: test_eval_gan.py."""
import numpy as np
import pytest

from helpers import fid_stats as _stats
from helpers import quiet_fid as _quiet
from tianyuan.evaluation import gan
from tianyuan.evaluation.image_files import FIDWarning

RNG = np.random.default_rng(0)


def _reference_fid(mu1, s1, mu2, s2):
    """FID with Tr(sqrtm(S1 S2)) as the sum of the square roots of S1 S2's eigenvalues,
    from a general (non-symmetric) eigen-solver."""
    roots = np.sqrt(np.linalg.eigvals(s1 @ s2).astype(complex))
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2) - 2 * roots.real.sum())


# -- the Frechet distance --------------------------------------------------------------------

def test_frechet_distance_is_its_definition():
    a, b = _stats(400, 48, 1), _stats(300, 48, 2, scale=1.5)
    got = gan.frechet_distance(*a, *b)
    assert got == pytest.approx(_reference_fid(*a, *b), rel=1e-10)
    assert got == pytest.approx(gan.frechet_distance(*b, *a), rel=1e-10)
    assert abs(gan.frechet_distance(*a, *a)) < 1e-9 * np.trace(a[1])


def test_frechet_distance_closed_forms():
    d = 512    # pytorch-fid's own test: equal covariances leave the squared mean difference
    assert gan.frechet_distance(np.zeros(d), np.eye(d), np.ones(d), np.eye(d)) == d
    var1, var2 = RNG.uniform(0.1, 4, 16), RNG.uniform(0, 4, 16)   # diagonal: per-axis terms
    mu1, mu2 = RNG.standard_normal(16), RNG.standard_normal(16)
    want = np.sum((mu1 - mu2) ** 2) + np.sum((np.sqrt(var1) - np.sqrt(var2)) ** 2)
    got = gan.frechet_distance(mu1, np.diag(var1), mu2, np.diag(var2))
    assert got == pytest.approx(want, rel=1e-12)


def test_fewer_images_than_dimensions_warns_and_still_is_the_definition():
    with pytest.warns(FIDWarning, match="30 images for 64-d features: the covariance is "
                                        "rank-deficient"):
        a = gan.statistics(RNG.standard_normal((30, 64)))
    b = _stats(200, 64, 3)
    assert gan.frechet_distance(*a, *b) == pytest.approx(_reference_fid(*a, *b), rel=1e-6)


def test_imaginary_roots_are_dropped_offset_or_refused_as_pytorch_fid(capsys):
    mu, eye = np.zeros(3), np.eye(3)
    # root of -1e-7: imaginary 3e-4, within pytorch-fid's 1e-3; its real part is 0
    got = gan.frechet_distance(mu, np.diag([1.0, 2.0, -1e-7]), mu, eye)
    assert got == pytest.approx(3 - 1e-7 + 3 - 2 * (1 + np.sqrt(2)), rel=1e-12)
    assert capsys.readouterr().out == ""
    # -1.5e-6: 1.2e-3, so retried with 1e-6 * I added: -5e-7, within it
    got = gan.frechet_distance(mu, np.diag([1.0, 2.0, -1.5e-6]), mu, eye)
    assert "adding 1e-06 to diagonal of cov estimates" in capsys.readouterr().out
    assert got == pytest.approx(6 - 2 * (1 + np.sqrt(2)), abs=1e-5)
    for s1, s2 in ((np.diag([1.0, 2.0, -1.0]), eye), (eye, np.diag([1.0, 2.0, -1.0]))):
        with pytest.raises(ValueError, match="Imaginary component 0.99999"):
            gan.frechet_distance(mu, s1, mu, s2)


@pytest.mark.parametrize("args, match", [
    ((np.zeros(3), np.eye(3), np.zeros(4), np.eye(4)), "different dimensions: 3 and 4"),
    ((np.zeros(3), np.eye(4), np.zeros(3), np.eye(3)), r"mu \(3,\) and sigma \(4, 4\)"),
    ((np.zeros(3), np.triu(np.ones((3, 3))), np.zeros(3), np.eye(3)), "not symmetric"),
    ((np.full(3, np.nan), np.eye(3), np.zeros(3), np.eye(3)), "NaN"),
])
def test_frechet_distance_refuses_what_is_not_statistics(args, match):
    with pytest.raises(ValueError, match=match):
        gan.frechet_distance(*args)


def test_statistics_are_pytorch_fids_and_refuse_bad_features():
    feats = RNG.random((40, 8)).astype(np.float32)
    mu, sigma = _quiet(gan.statistics, feats)
    assert mu.dtype == sigma.dtype == np.float64
    np.testing.assert_array_equal(mu, np.mean(feats.astype(np.float64), axis=0))
    np.testing.assert_array_equal(sigma, np.cov(feats.astype(np.float64), rowvar=False))
    bad = feats.copy()
    bad[[3, 7], 1] = np.nan
    with pytest.raises(ValueError, match="2 feature rows hold NaN"):
        gan.statistics(bad)
    with pytest.raises(ValueError, match="at least 2 images"):
        gan.statistics(feats[:1])


# -- statistics files -------------------------------------------------------------------------

def test_statistics_files_round_trip_in_pytorch_fids_format(tmp_path):
    mu, sigma = _stats(50, 6, 4)
    path = gan.save_statistics(tmp_path / "real", mu, sigma)
    assert path.endswith("real.npz")
    with np.load(path) as data:
        assert sorted(data.files) == ["mu", "sigma"]
    got = gan.load_statistics(path)
    np.testing.assert_array_equal(got[0], mu)
    np.testing.assert_array_equal(got[1], sigma)
    np.savez(tmp_path / "ttur.npz", mu=mu.astype(np.float32), sigma=sigma, extra=np.zeros(1))
    assert gan.load_statistics(tmp_path / "ttur.npz")[0].dtype == np.float64


@pytest.mark.parametrize("arrays, match", [
    ({"mu": np.zeros(4), "sigma": np.eye(3)}, r"bad.npz: need mu \(D,\) and sigma \(D, D\), "
                                              r"got mu \(4,\) and sigma \(3, 3\)"),
    ({"m": np.zeros(3), "sigma": np.eye(3)}, r"bad.npz: .*'mu' and 'sigma', this one \['m', "),
    ({"mu": np.zeros((3, 1)), "sigma": np.eye(3)}, r"bad.npz: need mu \(D,\)"),
])
def test_a_wrong_statistics_file_is_named(tmp_path, arrays, match):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=match):
        gan.load_statistics(tmp_path / "bad.npz")


def test_a_file_that_is_no_npz_is_refused(tmp_path):
    (tmp_path / "x.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="x.npz: not an .npz statistics file"):
        gan.load_statistics(tmp_path / "x.npz")
    with pytest.raises(FileNotFoundError):
        gan.load_statistics(tmp_path / "missing.npz")


# -- Inception Score --------------------------------------------------------------------------

def _reference_is(logits, splits=10):
    """The original code (openai/improved-gan) on softmax probabilities."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    preds = e / e.sum(axis=1, keepdims=True)
    scores = []
    for i in range(splits):
        part = preds[(i * preds.shape[0] // splits):((i + 1) * preds.shape[0] // splits), :]
        kl = part * (np.log(part) - np.log(np.expand_dims(np.mean(part, 0), 0)))
        scores.append(np.exp(np.mean(np.sum(kl, 1))))
    return np.mean(scores), np.std(scores)


def test_inception_score_is_the_original_computation():
    logits = RNG.standard_normal((1003, 1008)) * 4      # 1003: splits of 100 and 101
    got = gan.inception_score(logits)
    np.testing.assert_allclose(got, _reference_is(logits), rtol=1e-10)
    assert gan.inception_score(np.zeros((20, 1008)), splits=2) == pytest.approx((1.0, 0.0))
    confident = 200 * np.eye(1008)[np.arange(100) % 10]     # 10 classes in every split
    assert gan.inception_score(confident) == pytest.approx((10.0, 0.0))


def test_inception_score_refuses_bad_logits():
    with pytest.raises(ValueError, match="NaN"):
        gan.inception_score(np.full((20, 5), np.nan))
    with pytest.raises(ValueError, match="splits=10"):
        gan.inception_score(np.zeros((9, 5)))
