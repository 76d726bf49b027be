"""FID and Inception Score, computed as pytorch-fid and the original TF Inception Score do.

    from tianyuan import zoo
    from tianyuan.evaluation import gan
    model = zoo.fid_inception_v3(weights="fid_inception_v3.imagenet_tf2015_pytorch_fid")
    feats, logits = gan.inception_features(model, images)    # uint8 (N, C, H, W) or [0, 1]
    mu, sigma = gan.statistics(feats)                        # float64 (2048,), (2048, 2048)
    fid = gan.frechet_distance(mu, sigma, mu_real, sigma_real)
    is_mean, is_std = gan.inception_score(logits, splits=10)
    gan.save_statistics("cifar10_train.npz", mu, sigma)      # pytorch-fid's npz: mu, sigma
    mu, sigma = gan.folder_statistics("samples/", model)     # a folder of images, or an .npz

    evaluator = gan.GANEvaluator(mu_real, sigma_real, model)   # for a GAN task
    evaluator.reset()
    evaluator.process(None, fake_images)     # uint8, or floats in value_range (tanh: -1..1)
    evaluator.evaluate()                     # {"fid": ..., "is_mean": ..., "is_std": ...}

What pytorch-fid does, and so do these: images as RGB in [0, 1] (uint8 / 255), resized by
the model bilinearly to 299 x 299 and scaled to [-1, 1]; features the 2048-d final pool;
mu the mean and sigma `np.cov` (float64, N - 1) of the features; FID
||mu1 - mu2||^2 + Tr(S1 + S2 - 2 sqrt(S1 S2)). Its matrix square root is scipy's sqrtm; only
its trace enters FID, and that is the sum of the square roots of the eigenvalues of
L' S2 L (L a Cholesky factor of S1) or of sqrt(S1) S2 sqrt(S1) (where neither covariance is
definite: fewer images than dimensions), symmetric matrices with the eigenvalues of S1 S2:
numpy's `eigvalsh`, exact in exact arithmetic and stabler than a general sqrtm.
As scipy's root, a negative eigenvalue's root is imaginary and drops out of the real part
pytorch-fid keeps; pytorch-fid's safeguards keep their meaning: an imaginary part above
1e-3 is retried once with eps * I added to both covariances (said in one line, as
pytorch-fid says it), and refused if it stays.

Inception Score: exp(E_x KL(p(y|x) || p(y))) over 10 consecutive splits, mean and std, as
the original code (openai/improved-gan) computes it on the 1008-class TF graph; its logits
are that graph's matmul without the bias (torch-fidelity's "logits_unbiased"), which
`inception_features` returns by default.

FID of fewer images than feature dimensions (2048) uses a rank-deficient covariance: a
`FIDWarning` says so; it is biased and not comparable with published numbers.
"""
import warnings
import zipfile

import numpy as np

import tianyuan as ty
from tianyuan.progress import progress as progress_bar

from .evaluator import Evaluator
from .image_files import FIDWarning, folder_batches, list_images

IMAG_TOLERANCE = 1e-3     # pytorch-fid: np.allclose(diagonal(covmean).imag, 0, atol=1e-3)


# -- features ---------------------------------------------------------------------------------

def unit_images(images, value_range=None, what="images"):
    """(N, 3, H, W) float32 in [0, 1]: uint8 / 255 (as torchvision's ToTensor), or floats
    mapped from `value_range` (a generator's tanh: (-1, 1)), else required in [0, 1].
    One channel is repeated to three (PIL's convert("RGB") of a grey image)."""
    x = images.numpy() if hasattr(images, "numpy") else np.asarray(images)
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        last = x.ndim == 4 and x.shape[-1] in (1, 3)
        hint = " (channels last? give (N, C, H, W))" if last else ""
        raise ValueError(f"{what}: need (N, 3 or 1, H, W) images, got shape {x.shape}{hint}")
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / np.float32(255)
    elif np.issubdtype(x.dtype, np.floating):
        x = _floats_to_unit(x.astype(np.float32), value_range, what)
    else:
        raise ValueError(f"{what}: need uint8 or float images, got {x.dtype}")
    return np.repeat(x, 3, axis=1) if x.shape[1] == 1 else x


def _floats_to_unit(x, value_range, what):
    if not np.isfinite(x).all():
        raise ValueError(f"{what}: {int((~np.isfinite(x)).sum())} NaN or infinite values")
    if value_range is not None:
        lo, hi = (float(v) for v in value_range)
        return np.clip((x - np.float32(lo)) / np.float32(hi - lo), 0, 1)
    if x.min() < -1e-6 or x.max() > 1 + 1e-6:
        raise ValueError(f"{what}: float images must be in [0, 1], got {x.min():.4g} .. "
                         f"{x.max():.4g}; give uint8, or value_range=(-1, 1) for a tanh output")
    return np.clip(x, 0, 1)


def batch_features(model, batch, unbiased_logits=True):
    """(features (n, 2048), logits (n, classes)) float32 of one batch in [0, 1]."""
    feats, logits = model.features_and_logits(ty.tensor(batch))
    feats = feats.numpy()
    if unbiased_logits:   # the original IS code's matmul, without the fc bias
        logits = feats @ model.fc.weight.numpy().T
    else:
        logits = logits.numpy()
    bad = ~np.isfinite(feats).all(axis=1)
    if bad.any():
        raise ValueError(f"Inception features: {int(bad.sum())} of {len(feats)} images gave NaN "
                         "or infinite features (broken weights or inputs?)")
    return np.asarray(feats, np.float32), np.asarray(logits, np.float32)


def features_of_batches(model, batches, total=None, progress=True, unbiased_logits=True,
                        value_range=None):
    """inception_features over an iterable of image batches (each (n, C, H, W), any size)."""
    model.eval()
    feats, logits = [], []
    bar = progress_bar(desc="inception", total=total, unit="img", disable=not progress)
    with ty.no_grad():
        for batch in batches:
            f, lg = batch_features(model, unit_images(batch, value_range), unbiased_logits)
            feats.append(f)
            logits.append(lg)
            bar.update(len(f))
    bar.close()
    if not feats:
        raise ValueError("inception_features: no images")
    return np.concatenate(feats), np.concatenate(logits)


def inception_features(model, images, batch_size=50, progress=True, unbiased_logits=True,
                       value_range=None):
    """(features (N, 2048), logits (N, 1008)) float32 of `images` (N, C, H, W): uint8, or
    floats in [0, 1] (in `value_range` if given), under no_grad in eval mode, `batch_size`
    at a time. The model (zoo.fid_inception_v3) resizes to 299 and scales to [-1, 1]."""
    n = len(images)
    if batch_size < 1:
        raise ValueError(f"inception_features: batch_size must be >= 1, got {batch_size}")
    batches = (images[i:i + batch_size] for i in range(0, n, batch_size))
    return features_of_batches(model, batches, n, progress, unbiased_logits, value_range)


# -- FID --------------------------------------------------------------------------------------

def statistics(features):
    """(mu (D,), sigma (D, D)) float64 of features (N, D), as pytorch-fid (np.cov, N - 1).
    Fewer images than dimensions: a FIDWarning (the covariance is rank-deficient)."""
    f = np.asarray(features)
    if f.ndim != 2:
        raise ValueError(f"statistics: need features (N, D), got shape {f.shape}")
    if len(f) < 2:
        raise ValueError(f"statistics: need at least 2 images for a covariance, got {len(f)}")
    if not np.isfinite(f).all():
        raise ValueError(f"statistics: {int((~np.isfinite(f)).any(axis=1).sum())} feature rows "
                         "hold NaN or infinite values")
    if len(f) < f.shape[1]:
        warnings.warn(f"{len(f)} images for {f.shape[1]}-d features: the covariance is "
                      "rank-deficient, so the FID is biased and not comparable with published "
                      f"numbers (use {f.shape[1]} or more images; 50000 is the convention)",
                      FIDWarning, stacklevel=2)
    f = f.astype(np.float64)
    return f.mean(axis=0), np.cov(f, rowvar=False)


def check_statistics(mu, sigma, what="statistics"):
    """mu (D,) and sigma (D, D) as float64, finite and sigma symmetric, else ValueError."""
    mu, sigma = np.asarray(mu, np.float64), np.asarray(sigma, np.float64)
    if mu.ndim != 1 or sigma.shape != (len(mu), len(mu)):
        raise ValueError(f"{what}: need mu (D,) and sigma (D, D), got mu {mu.shape} and "
                         f"sigma {sigma.shape}")
    if not (np.isfinite(mu).all() and np.isfinite(sigma).all()):
        raise ValueError(f"{what}: mu or sigma holds NaN or infinite values")
    scale = max(float(np.abs(sigma).max()), np.finfo(np.float64).tiny)
    if float(np.abs(sigma - sigma.T).max()) > 1e-5 * scale:
        raise ValueError(f"{what}: sigma is not symmetric, so not a covariance matrix")
    return mu, sigma


def _root_eigenvalues(sigma1, sigma2):
    """(eigenvalues of S1 S2, the largest imaginary part their square roots would have).

    With a Cholesky factor L of either covariance (positive definite: 2048 images or more)
    they are those of the symmetric L' S L of the other. Else they are those of
    sqrt(S1) S2 sqrt(S1) (eigh; S1's negative eigenvalues, which a covariance has only from
    rounding, taken as 0 in sqrt(S1)); an eigenvalue w < 0 of S1 with eigenvector v adds
    about w * v'S2v to them, counted in the imaginary part."""
    for a, b in ((sigma1, sigma2), (sigma2, sigma1)):
        try:
            low = np.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            continue
        m = low.T @ b @ low
        lam = np.linalg.eigvalsh((m + m.T) / 2)
        return lam, float(np.sqrt(max(-float(lam.min()), 0.0)))
    w, v = np.linalg.eigh(sigma1)
    root = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    m = root @ sigma2 @ root
    lam = np.linalg.eigvalsh((m + m.T) / 2)
    neg = v[:, w < 0]                                                   # (D, k)
    hidden = w[w < 0] * np.einsum("ij,ik,kj->j", neg, sigma2, neg)      # (k,)
    lowest = min([float(lam.min())] + [float(h) for h in hidden])
    return lam, float(np.sqrt(max(-lowest, 0.0)))


def trace_sqrt_product(sigma1, sigma2, eps=1e-6):
    """Tr(sqrtm(S1 S2)), the real part as scipy's sqrtm gives it (pytorch-fid keeps
    `covmean.real`). Square roots with an imaginary part above 1e-3 (pytorch-fid's limit)
    are retried once with eps * I added to both covariances (pytorch-fid's remedy for a
    singular product, said in one line as it does), then refused."""
    lam, imag = _root_eigenvalues(sigma1, sigma2)
    if imag > IMAG_TOLERANCE:
        print(f"fid calculation produces singular product; adding {eps} to diagonal of cov "
              "estimates", flush=True)
        offset = np.eye(len(sigma1)) * eps
        lam, imag = _root_eigenvalues(sigma1 + offset, sigma2 + offset)
        if imag > IMAG_TOLERANCE:
            raise ValueError(f"Imaginary component {imag}")
    return float(np.sum(np.sqrt(np.clip(lam, 0, None))))


def frechet_distance(mu1, sigma1, mu2, sigma2, eps=1e-6):
    """||mu1 - mu2||^2 + Tr(S1) + Tr(S2) - 2 Tr(sqrtm(S1 S2)), as pytorch-fid's
    calculate_frechet_distance (numpy only)."""
    mu1, sigma1 = check_statistics(mu1, sigma1, "frechet_distance (first)")
    mu2, sigma2 = check_statistics(mu2, sigma2, "frechet_distance (second)")
    if mu1.shape != mu2.shape:
        raise ValueError(f"frechet_distance: the statistics have different dimensions: "
                         f"{mu1.shape[0]} and {mu2.shape[0]}")
    diff = mu1 - mu2
    tr_covmean = trace_sqrt_product(sigma1, sigma2, eps)
    return float(diff.dot(diff) + np.trace(sigma1) + np.trace(sigma2) - 2 * tr_covmean)


# -- Inception Score --------------------------------------------------------------------------

def _log_softmax(logits):
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def inception_score(logits, splits=10):
    """(mean, std) over `splits` consecutive parts of exp(mean_x KL(p(y|x) || p(y))), in
    float64 from logits (N, C) (the original code's softmax and splits)."""
    logits = np.asarray(logits, np.float64)
    if logits.ndim != 2:
        raise ValueError(f"inception_score: need logits (N, C), got shape {logits.shape}")
    if not np.isfinite(logits).all():
        raise ValueError("inception_score: the logits hold NaN or infinite values")
    n = len(logits)
    if splits < 1 or n < splits:
        raise ValueError(f"inception_score: need at least splits={splits} >= 1 images, got {n}")
    log_p = _log_softmax(logits)
    scores = []
    for k in range(splits):
        part = log_p[k * n // splits:(k + 1) * n // splits]            # (n / splits, C)
        log_py = np.log(np.exp(part).mean(axis=0, keepdims=True))     # (1, C): log p(y)
        kl = (np.exp(part) * (part - log_py)).sum(axis=1)             # (n / splits,)
        scores.append(np.exp(kl.mean()))
    return float(np.mean(scores)), float(np.std(scores))


# -- statistics files (pytorch-fid's npz) -----------------------------------------------------

def save_statistics(path, mu, sigma):
    """Write pytorch-fid's statistics file (np.savez_compressed: mu, sigma); returns the path
    (numpy adds ".npz" when it is missing)."""
    mu, sigma = check_statistics(mu, sigma, f"save_statistics({path})")
    path = str(path) if str(path).endswith(".npz") else f"{path}.npz"
    np.savez_compressed(path, mu=mu, sigma=sigma)
    return path


def load_statistics(path):
    """(mu, sigma) float64 from a pytorch-fid / TTUR `.npz` (keys mu and sigma; no pickle)."""
    if not zipfile.is_zipfile(path):   # FileNotFoundError first, naming the path
        open(path, "rb").close()
        raise ValueError(f"{path}: not an .npz statistics file (pytorch-fid's: mu, sigma)")
    with np.load(path, allow_pickle=False) as data:
        if "mu" not in data.files or "sigma" not in data.files:
            raise ValueError(f"{path}: a statistics file holds arrays 'mu' and 'sigma', this "
                             f"one {sorted(data.files)}")
        mu, sigma = data["mu"], data["sigma"]
    return check_statistics(mu, sigma, str(path))


def folder_features(folder, model, batch_size=50, progress=True, n=None):
    """inception_features of a folder's images (pytorch-fid's extensions, any case, sorted;
    the first `n` only if given), read batch by batch (see image_files.py for grey and
    mixed-size images)."""
    files = list_images(folder, n)
    return features_of_batches(model, folder_batches(files, batch_size), len(files), progress)


def folder_statistics(folder_or_npz, model, batch_size=50, progress=True, n=None):
    """(mu, sigma) of a statistics file, or of a folder's images through `model`."""
    if str(folder_or_npz).endswith(".npz"):
        return load_statistics(folder_or_npz)
    return statistics(folder_features(folder_or_npz, model, batch_size, progress, n)[0])


# -- the evaluator a GAN task runs ------------------------------------------------------------

class GANEvaluator(Evaluator):
    """FID against real statistics (mu, sigma) and IS of generated images.

    process(batch, outputs): `outputs` are generated images (N, C, H, W), uint8 or floats in
    `value_range` (default a tanh's (-1, 1)); their Inception features and logits are
    computed at once and kept in memory as arrays (12 KB an image: 50k images ~0.6 GB);
    `records` holds only the counts, JSON-able. Data-parallel gathering of the features is
    not implemented: `evaluate` refuses records from other processes (run it in one).

    >>> inception = zoo.fid_inception_v3(weights="fid_inception_v3.imagenet_tf2015_pytorch_fid")
    >>> ev = GANEvaluator(*load_statistics("cifar10_train.npz"), model=inception)
    >>> ev.reset(); ev.process(None, generator(z)); ev.evaluate()    # {"fid", "is_mean", ...}
    """

    name = "gan"

    def __init__(self, mu, sigma, model=None, batch_size=50, value_range=(-1, 1), splits=10):
        super().__init__()
        if model is None:   # evaluation does not import the zoo: the caller builds it
            raise ValueError("GANEvaluator: give model=tianyuan.zoo.fid_inception_v3(weights="
                             "...), FID's Inception network (trainers/fid.py's load_model)")
        self.mu, self.sigma = check_statistics(mu, sigma, "GANEvaluator")
        self.model, self.batch_size = model, int(batch_size)
        self.value_range, self.splits = value_range, int(splits)
        self.features, self.logits = [], []

    @classmethod
    def from_reference(cls, folder_or_npz, model, n=None, progress=True, **kwargs):
        """Real statistics from an `.npz` or a folder of real images (computed here)."""
        mu, sigma = folder_statistics(folder_or_npz, model, kwargs.get("batch_size", 50),
                                      progress, n)
        return cls(mu, sigma, model, **kwargs)

    def reset(self):
        super().reset()
        self.features, self.logits = [], []

    def forward(self, model, batch):
        """A generator's images for one batch: `batch["z"]` if it is a dict, else `batch`."""
        z = batch["z"] if isinstance(batch, dict) else batch
        return model(ty.tensor(z))

    def process(self, batch, outputs):
        images = outputs.numpy() if hasattr(outputs, "numpy") else np.asarray(outputs)
        value_range = None if images.dtype == np.uint8 else self.value_range
        self.model.eval()
        for i in range(0, len(images), self.batch_size):
            x = unit_images(images[i:i + self.batch_size], value_range, "GANEvaluator")
            with ty.no_grad():
                f, lg = batch_features(self.model, x)
            self.features.append(f)
            self.logits.append(lg)
        self.records.append({"images": len(images)})

    def evaluate(self):
        seen = sum(r["images"] for r in self.records)
        feats = np.concatenate(self.features) if self.features else np.zeros((0, 2048))
        if seen != len(feats):
            raise NotImplementedError(f"GANEvaluator: {seen} images in the records but {len(feats)}"
                                      " features here: gathering features across processes "
                                      "is not implemented; evaluate in one process")
        mu, sigma = statistics(feats)
        is_mean, is_std = inception_score(np.concatenate(self.logits), self.splits)
        return {"fid": frechet_distance(mu, sigma, self.mu, self.sigma), "is_mean": is_mean,
                "is_std": is_std, "images": int(seen)}

    def postfix(self):
        return f"{sum(r['images'] for r in self.records)} images"
