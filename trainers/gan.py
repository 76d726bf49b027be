"""The generation task: a GAN's critic and generator steps on the shared Trainer, sample
grids, an averaged generator, FID/IS on a schedule.

One iteration is one generator step, as the references count them (mimicry's and
pytorch-gan-collections' "100k steps"): `n_critic` discriminator steps, each on its own
`data.batch_size` real images (the loader gives n_critic of them at once), then one
generator step on `generator_batch` noise vectors. The LR schedules (linear decay to 0 in
the recipes) step once per iteration. Noise is drawn from the framework's seeded stream,
which checkpoints hold, so a resumed run is bit-identical.

- `loss`: "ns", DCGAN's non-saturating BCE (Goodfellow et al. 2014, section 3): the
  discriminator minimises BCE(D(x), 1) + BCE(D(G(z)), 0), the generator BCE(D(G(z)), 1);
  "wasserstein" (Arjovsky et al. 2017): the critic minimises mean D(G(z)) - mean D(x),
  the generator -mean D(G(z)); with `clip` the critic's weights are clipped to
  [-clip, clip] after each of its steps (WGAN-WC); "wgan-gp" (Gulrajani et al. 2017): the
  Wasserstein losses plus `gp_weight` times the gradient penalty on the critic's steps.
- `ema`: a decay (0.999) keeps `generator_ema`, the moving average of the generator's
  weights (its BN statistics copied), in the model: checkpoints hold it; samples and FID
  use it.
- `samples`: a grid of fixed noise (seeded, the same every time) written as
  out_dir/samples/iter_<8 digits>.png every `every` iterations and at the end.
- `fid`: with `stats` (the real images' Inception statistics, evaluation/gan.py) the
  evaluator scores `samples` generated images of fixed noise every
  trainer.eval_every_iters iterations and at the end; the best checkpoint tracks FID
  (lower is better). Without it training runs without FID.

>>> task = GANTask(loss="wasserstein", n_critic=5, clip=0.03)
>>> task = GANTask(loss="wgan-gp", n_critic=5, gp_weight=10.0)
"""
import inspect
import math
import os

import numpy as np
from hydra.utils import get_object, instantiate

import tianyuan as ty
import tianyuan.functional as F
from tianyuan.evaluation import Evaluator

from .task import Task


def ns_discriminator(real, fake):
    """BCE(real, 1) + BCE(fake, 0) of logits (N, 1): softplus(-real) + softplus(fake)."""
    return F.softplus(-real).mean() + F.softplus(fake).mean()


def ns_generator(fake):
    """The non-saturating generator loss BCE(D(G(z)), 1) = softplus(-D(G(z)))."""
    return F.softplus(-fake).mean()


def wasserstein_discriminator(real, fake):
    return fake.mean() - real.mean()


def wasserstein_generator(fake):
    return -fake.mean()


def gradient_penalty(critic, real, fake, weight=10.0):
    """WGAN-GP's penalty (Gulrajani et al. 2017, algorithm 1): weight * mean over the batch
    of (||grad_x critic(x)||_2 - 1)^2 at x = t * real + (1 - t) * fake, t ~ U[0, 1) per
    sample from the framework's seeded stream. The gradient is taken with create_graph, so
    the penalty back-propagates into the critic's parameters.

    >>> loss = wasserstein_discriminator(d_real, d_fake) + gradient_penalty(critic, x, y)
    """
    n = real.shape[0]
    t = ty.rand(*((n,) + (1,) * (real.ndim - 1)), dtype=real.dtype)   # (N, 1, 1, 1)
    with ty.no_grad():
        x = t * real + (1.0 - t) * fake
    x.requires_grad_()
    score = critic(x)
    (grad,) = ty.autograd.grad(score, x, ty.ones_like(score), create_graph=True)
    norm = F.sqrt((grad * grad).reshape(n, -1).sum(axis=1))         # (N,)
    return ((norm - 1.0) ** 2).mean() * weight


LOSSES = {"ns": (ns_discriminator, ns_generator),
          "wasserstein": (wasserstein_discriminator, wasserstein_generator),
          "wgan-gp": (wasserstein_discriminator, wasserstein_generator)}


def fixed_noise(count, nz, seed):
    """(count, nz) standard normal noise of its own generator: the same at every call."""
    return np.random.default_rng(seed).standard_normal((count, nz)).astype(np.float32)


def generate(generator, noise, batch_size=100):
    """Images (N, 3, H, W) float32 in [-1, 1] of `noise` (N, nz), in eval mode (BN's running
    statistics), batch by batch; the generator's mode is restored."""
    was_training = generator.training
    generator.eval()
    try:
        with ty.no_grad():
            parts = [generator(ty.tensor(noise[i:i + batch_size])).numpy()
                     for i in range(0, len(noise), batch_size)]
    finally:
        generator.train(was_training)
    return np.concatenate(parts)


def to_uint8(images):
    """(N, 3, H, W) in [-1, 1] -> (N, H, W, 3) uint8 RGB: pixel = (x + 1) * 127.5."""
    pixels = np.clip(np.rint((images + 1.0) * 127.5), 0, 255).astype(np.uint8)
    return pixels.transpose(0, 2, 3, 1)


def make_grid(images, nrow=None, padding=2):
    """(N, 3, H, W) in [-1, 1] -> one (rows * (H + p) + p, nrow * (W + p) + p, 3) uint8 image,
    `nrow` images a row (default: a square-ish grid), black borders."""
    pixels = to_uint8(images)
    n, h, w, _ = pixels.shape
    nrow = int(nrow or math.ceil(math.sqrt(n)))
    rows = -(-n // nrow)
    grid = np.zeros((rows * (h + padding) + padding, nrow * (w + padding) + padding, 3), np.uint8)
    for k, image in enumerate(pixels):
        top, left = padding + (k // nrow) * (h + padding), padding + (k % nrow) * (w + padding)
        grid[top:top + h, left:left + w] = image
    return grid


def write_png(path, image):
    """Write an (H, W, 3) uint8 RGB image as PNG (OpenCV, as datasets.synthetic)."""
    import cv2
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if not cv2.imwrite(str(path), np.ascontiguousarray(image[..., ::-1])):   # RGB -> BGR
        raise OSError(f"write_png: could not write {path}")
    return path


class SampleHook:
    """A grid of the sampler's images of fixed noise every `every` iterations (0: only at
    the end) and at the end: out_dir/samples/iter_<8 digits>.png."""

    def __init__(self, every=500, count=64, seed=0):
        self.every, self.count, self.seed = int(every or 0), int(count), int(seed)
        self.trainer, self.last, self.path = None, None, None

    def write(self):
        trainer = self.trainer
        if self.last == trainer.iter:
            return self.path
        model = trainer.model
        images = generate(model.sampler(), fixed_noise(self.count, model.nz, self.seed))
        self.path = write_png(os.path.join(trainer.out_dir, "samples",
                                           f"iter_{trainer.iter:08d}.png"), make_grid(images))
        self.last = trainer.iter
        return self.path

    def after_step(self):
        if self.every and self.trainer.iter % self.every == 0:
            self.write()

    def after_train(self):
        self.trainer.write(f"samples: {self.write()}")


class NoiseBatches:
    """The "loader" a GAN is evaluated over: `count` noise vectors in batches, the same at
    every evaluation. Batches are {"index": i, "size": n}; the evaluator draws their noise
    with the model's nz from a generator seeded by (seed, i)."""

    def __init__(self, count, batch_size, seed=0):
        self.count, self.batch_size, self.seed = int(count), int(batch_size), int(seed)

    def __len__(self):
        return -(-self.count // self.batch_size)

    def __iter__(self):
        for i, start in enumerate(range(0, self.count, self.batch_size)):
            yield {"index": i, "size": min(self.batch_size, self.count - start)}


class GeneratorEvaluation(Evaluator):
    """Scores a GAN's samples with an evaluator of generated images (evaluation/gan.py's
    GANEvaluator: reset, process(None, images), evaluate -> {"fid", "is_mean", "is_std"}),
    driven by `inference` over NoiseBatches. Under mpiexec every process scores all the
    samples (the images' features stay inside the wrapped evaluator)."""

    name = "gan"

    def __init__(self, images_evaluator, seed=0):
        super().__init__()
        self.images, self.seed = images_evaluator, int(seed)

    def reset(self):
        super().reset()
        self.images.reset()

    def forward(self, model, batch):
        rng = np.random.default_rng([self.seed, int(batch["index"])])
        noise = rng.standard_normal((int(batch["size"]), model.nz)).astype(np.float32)
        return model.sampler()(ty.tensor(noise))                # (n, 3, H, W) in [-1, 1]

    def process(self, batch, outputs):
        self.images.process(None, outputs.numpy())

    def evaluate(self):
        return dict(self.images.evaluate())


def update_ema(average, model, decay):
    """average = decay * average + (1 - decay) * model, parameter by parameter; buffers (BN
    running statistics) copied."""
    for ours, theirs in zip(average.parameters(), model.parameters()):
        ours.data *= decay
        ours.data += (1.0 - decay) * theirs.data
    for ours, theirs in zip(average.buffers(), model.buffers()):
        ours.data[...] = theirs.data


class GANTask(Task):
    """Critic steps then a generator step (module docstring); FID is tracked, lower better."""

    name, metric, mode = "generation", "fid", "min"

    def __init__(self, loss="ns", n_critic=1, clip=None, generator_batch=None, ema=None,
                 samples=None, fid=None, gp_weight=10.0):
        if loss not in LOSSES:
            raise ValueError(f"gan: task.loss must be one of {sorted(LOSSES)}, got {loss!r}")
        if int(n_critic) < 1:
            raise ValueError(f"gan: task.n_critic must be >= 1, got {n_critic}")
        if ema is not None and not 0.0 < float(ema) < 1.0:
            raise ValueError(f"gan: task.ema must be null or a decay in (0, 1), got {ema}")
        self.loss, self.n_critic = loss, int(n_critic)
        self.gp_weight = float(gp_weight)   # loss wgan-gp: the penalty's weight (lambda)
        self.clip = None if clip is None else float(clip)
        self.generator_batch = None if generator_batch is None else int(generator_batch)
        self.ema = None if ema is None else float(ema)
        self.samples = {"every": 500, "count": 64, "seed": 0, **dict(samples or {})}
        self.fid = {"stats": None, "inception": None, "samples": 10000, "batch": 100, "seed": 0,
                    "splits": 10, **dict(fid or {})}

    # ------------------------------------------------------------ building
    def build_data(self, cfg):
        """The data config's train loader, its batches n_critic x data.batch_size images
        (labels ignored), and NoiseBatches for FID when `fid.stats` is given."""
        data = cfg.data
        if data.get("batch_size") is None:
            raise ValueError("gan: the data config needs batch_size (images per critic step)")
        takes = inspect.signature(get_object(data._target_)).parameters
        extra = {"splits": ["train"]} if "splits" in takes else {}
        train, _, meta = instantiate(data, seed=cfg.seed, **extra,
                                     batch_size=int(data.batch_size) * self.n_critic)
        fid = self.fid
        noise = NoiseBatches(fid["samples"], fid["batch"], fid["seed"]) if fid["stats"] else None
        return train, noise, meta

    def build_model(self, cfg, meta):
        import copy
        model = instantiate(cfg.model)
        if not all(hasattr(model, part) for part in ("generator", "discriminator", "nz")):
            raise ValueError(f"gan: the model ({type(model).__name__}) must be a GAN with "
                             "generator and discriminator (tianyuan.zoo.gan.GAN): model=dcgan_"
                             "cifar10 | wgan_cifar10 | dcgan_cnn32_cifar10 | wgan_cnn32_cifar10")
        if self.ema is not None and "generator_ema" not in model._modules:
            model.generator_ema = copy.deepcopy(model.generator).requires_grad_(False)
        return model

    def optimizers(self, cfg, model):
        """One optimizer (cfg.optim) per network."""
        return {part: instantiate(cfg.optim)(getattr(model, part).parameters())
                for part in ("discriminator", "generator")}

    def evaluator(self, cfg, meta):
        """FID/IS of the samples against `fid.stats`, or None (no statistics given)."""
        fid = self.fid
        if not fid["stats"]:
            return None
        from tianyuan.evaluation import gan as gan_metrics
        mu, sigma = gan_metrics.load_statistics(fid["stats"])
        options = {"inception": fid["inception"], "splits": fid["splits"],
                   "batch_size": fid["batch"]}
        takes = inspect.signature(gan_metrics.GANEvaluator).parameters
        if "model" in takes:   # FID's Inception, built here (evaluation imports no zoo)
            from .fid import DEFAULT_WEIGHTS, load_model
            options["model"] = load_model(fid["inception"] or DEFAULT_WEIGHTS)
        options = {k: v for k, v in options.items() if k in takes and v is not None}
        return GeneratorEvaluation(gan_metrics.GANEvaluator(mu, sigma, **options), fid["seed"])

    def hooks(self, cfg):
        return [SampleHook(**self.samples)]

    def results(self, trainer):
        """The last sample grid written (results.json's "samples")."""
        hook = next((h for h in trainer.hooks if isinstance(h, SampleHook)), None)
        return {"samples": hook.path} if hook is not None and hook.path else {}

    # ------------------------------------------------------------ tianyuan quantize
    def quant_data(self, cfg, pre):
        """Noise batches: for calibration (seeded apart from the evaluation's) and for FID/IS
        of the generator's samples, which need `fid.stats`."""
        _, noise, meta = self.build_data(cfg)
        if noise is None:
            raise ValueError("quantize: a generator is scored by FID/IS against the real "
                             "images' statistics: give task.fid.stats=FILE.npz (tianyuan fid "
                             "--save-stats)")
        count = int(cfg.get("calib_batches", 32)) * noise.batch_size
        return NoiseBatches(count, noise.batch_size, noise.seed + 1), noise, meta

    def quant_keep_float(self, model):
        return ["discriminator"]       # int8 is for the generator; the critic trains QAT

    def quant_inputs(self, model, loader, count):
        rng = np.random.default_rng(self.fid["seed"])
        return rng.standard_normal((int(count), model.nz)).astype(np.float32)

    def quant_forward(self, model, x):
        return model.sampler()(x)

    def report_metrics(self, metrics):
        return {k: metrics[k] for k in ("fid", "is_mean") if k in metrics}

    # ------------------------------------------------------------ one iteration
    def run_step(self, trainer, batch):
        model = trainer.model
        reals = np.split(np.asarray(batch["image"]), self.n_critic)   # n_critic x (B, 3, H, W)
        for real in reals:
            logs = self.discriminator_step(trainer, model, real)
        logs.update(self.generator_step(trainer, model, self.generator_batch or len(reals[0])))
        if self.ema is not None:
            update_ema(model.generator_ema, model.generator, self.ema)
        return logs

    def discriminator_step(self, trainer, model, real):
        with ty.no_grad():
            fake = model.generator(model.noise(len(real)))
        real = ty.tensor(real)
        d_real, d_fake = model.discriminator(real), model.discriminator(fake)
        losses = {"loss_d": LOSSES[self.loss][0](d_real, d_fake),
                  "d_real": d_real.mean().detach(), "d_fake": d_fake.mean().detach()}
        if self.loss == "wgan-gp":
            losses["loss_gp"] = gradient_penalty(model.discriminator, real, fake,
                                                 self.gp_weight)
        logs = trainer.optimize(losses, "discriminator")
        if self.clip is not None:
            for p in model.discriminator.parameters():
                np.clip(p.data, -self.clip, self.clip, out=p.data)
        return logs

    def generator_step(self, trainer, model, count):
        """The discriminator's parameters are frozen for this step (as pytorch-gan-collections
        and mimicry do): the generator's loss needs only its input gradient, not the weight
        gradients its optimizer would zero before its next step anyway."""
        frozen = [p for p in model.discriminator.parameters() if p.requires_grad]
        for p in frozen:
            p.requires_grad_(False)
        try:
            score = model.discriminator(model.generator(model.noise(count)))
            return trainer.optimize({"loss_g": LOSSES[self.loss][1](score)}, "generator")
        finally:
            for p in frozen:
                p.requires_grad_(True)
