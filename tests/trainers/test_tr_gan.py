"""The GAN task on the shared Trainer: smoke_gan trains (tiny widths, a few iterations) and
writes sample grids; a run killed mid-epoch resumes bit-identical with both optimizers and
the averaged generator; FID through a stand-in evaluator every N iterations keeps the best
(lowest) checkpoint; `tianyuan generate` writes grids, folders and .npz."""
import json
import sys
import types

import cv2
import numpy as np
import pytest
from tr_helpers import Crash, CrashAt, assert_same_state, build_with_hooks

import tianyuan as ty
from tianyuan.trainers import cli, gan, train
from tianyuan.trainers.config import compose

TINY = ["model.ngf=8", "model.ndf=8"]


@pytest.fixture(autouse=True)
def _threads():
    """One kernel thread (the tiny convolutions lose most to threads waiting on a busy
    machine); the process's count is restored after."""
    count = ty.get_num_threads()
    yield
    ty.set_num_threads(count)


def gan_cfg(shapes_root, out_dir, *overrides):
    """smoke_gan on the 300-image shared tree at a tiny width: batch 16 (x n_critic)."""
    return compose("train", ["experiment=smoke_gan", f"data.root={shapes_root}",
                             f"out_dir={out_dir}", "trainer.progress=false",
                             "data.batch_size=16", "trainer.max_iters=6", "trainer.num_threads=1",
                             *TINY, *overrides])


def _read(path):
    return cv2.imread(str(path))[..., ::-1]   # RGB


def test_smoke_gan_trains_and_writes_sample_grids(shapes_root, tmp_path):
    result = train.run(gan_cfg(shapes_root, tmp_path, "task.samples.every=3",
                               "trainer.log_every=2"))
    assert result["iterations"] == 6 and result["task"] == "generation"
    steps = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    steps = [s for s in steps if "loss_d" in s]
    assert [s["iter"] for s in steps] == [2, 4, 6]
    assert all(np.isfinite([s["loss_d"], s["loss_g"], s["d_real"], s["d_fake"]]).all()
               for s in steps)
    grids = sorted(p.name for p in (tmp_path / "samples").iterdir())
    assert grids == ["iter_00000003.png", "iter_00000006.png"]
    grid = _read(tmp_path / "samples" / "iter_00000006.png")
    assert grid.shape == (8 * 34 + 2, 8 * 34 + 2, 3)         # 64 images, 2-pixel borders
    assert grid[:2].max() == 0 and grid[2:34, 2:34].std() > 0
    assert (tmp_path / "model_final.safetensors").exists()


def test_killed_and_resumed_bit_identical(shapes_root, tmp_path):
    # WGAN-WC with two critic steps an iteration and an averaged generator: 32 images an
    # iteration, 9 a pass; checkpoints at 2 and 4, killed at 3, resumed from 2 (mid-pass)
    extra = ["task.loss=wasserstein", "task.clip=0.05", "task.n_critic=2", "task.ema=0.9",
             "task.generator_batch=8", "trainer.checkpoint_every=2", "task.samples.every=0",
             "trainer.max_iters=4"]
    reference = build_with_hooks(gan_cfg(shapes_root, tmp_path / "ref", *extra))
    reference.train()
    assert reference.iter == 4 and "generator_ema.l1.weight" in reference.model.state_dict()
    critic = [p.numpy() for p in reference.model.discriminator.parameters()]
    assert max(np.abs(p).max() for p in critic) == np.float32(0.05)   # clipped, and reached

    crashing = build_with_hooks(gan_cfg(shapes_root, tmp_path / "run", *extra), CrashAt(3))
    with pytest.raises(Crash):
        crashing.train()
    resumed = build_with_hooks(gan_cfg(shapes_root, tmp_path / "run", *extra))
    assert resumed.resume() is not None and resumed.iter == 2
    resumed.train()
    assert resumed.iter == 4
    assert_same_state(resumed.model.state_dict(), reference.model.state_dict())
    for name in ("discriminator", "generator"):
        ours = resumed.optimizers[name].state_dict()
        theirs = reference.optimizers[name].state_dict()
        assert ours["param_groups"][0]["lr"] == theirs["param_groups"][0]["lr"]
        for key, state in ours["state"].items():
            for field in ("exp_avg", "exp_avg_sq"):
                assert np.array_equal(state[field], theirs["state"][key][field])


class _ImagesEvaluator:
    """Stands in for evaluation/gan.py's GANEvaluator: "fid" from the images' mean."""

    def __init__(self, mu, sigma, splits=10):
        self.mu, self.seen = float(mu), []

    def reset(self):
        self.seen = []

    def process(self, batch, images):
        assert batch is None and images.shape[1:] == (3, 32, 32)
        self.seen.append(images)

    def evaluate(self):
        images = np.concatenate(self.seen)
        return {"fid": float(abs(images.mean() - self.mu)) + len(images), "is_mean": 1.0,
                "is_std": 0.0}


def fake_fid(monkeypatch):
    """evaluation/gan.py replaced by the stand-in evaluator (no Inception network)."""
    fake = types.ModuleType("tianyuan.evaluation.gan")
    fake.GANEvaluator = _ImagesEvaluator
    fake.load_statistics = lambda path: (0.0, None)
    import tianyuan.evaluation
    monkeypatch.setitem(sys.modules, "tianyuan.evaluation.gan", fake)
    monkeypatch.setattr(tianyuan.evaluation, "gan", fake, raising=False)


def test_fid_every_n_iterations_keeps_the_lowest(shapes_root, tmp_path, monkeypatch):
    fake_fid(monkeypatch)
    result = train.run(gan_cfg(shapes_root, tmp_path, "task.fid.stats=real.npz",
                               "task.fid.samples=30", "task.fid.batch=16",
                               "trainer.eval_every_iters=3", "trainer.max_iters=4"))
    evals = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    evals = [(r["iter"], r["eval"]) for r in evals if "eval" in r]
    assert [i for i, _ in evals] == [3, 4]             # every 3 iterations and at the end
    assert all(30 <= e["fid"] < 31 for _, e in evals)
    assert result["best_fid"] == min(e["fid"] for _, e in evals)
    best = ty.load(str(tmp_path / "best.safetensors"))
    assert best["fid"] == result["best_fid"]


def test_losses_are_the_references():
    real = ty.tensor(np.array([[2.0], [-1.0]], np.float32))
    fake = ty.tensor(np.array([[0.5], [-3.0]], np.float32))
    bce = lambda x, t: np.mean(-(t * np.log(1 / (1 + np.exp(-x))) +
                                 (1 - t) * np.log(1 - 1 / (1 + np.exp(-x)))))
    r, f = real.numpy(), fake.numpy()
    assert float(gan.ns_discriminator(real, fake).item()) == pytest.approx(bce(r, 1) + bce(f, 0))
    assert float(gan.ns_generator(fake).item()) == pytest.approx(bce(f, 1))
    assert float(gan.wasserstein_discriminator(real, fake).item()) == pytest.approx(-1.75)
    assert float(gan.wasserstein_generator(fake).item()) == pytest.approx(1.25)


def test_generate_writes_a_grid_a_folder_and_npz(shapes_root, tmp_path, capsys):
    train.run(gan_cfg(shapes_root, tmp_path / "run", "trainer.max_iters=2",
                      "task.samples.every=0"))
    weights = tmp_path / "run" / "model_final.safetensors"
    base = ["generate", "model=dcgan_cifar10", *TINY, f"weights={weights}", "n=10",
            "num_threads=1"]
    assert cli.main([*base, f"out={tmp_path / 'a.png'}", "seed=1"]) == 0
    assert cli.main([*base, f"out={tmp_path / 'b.png'}", "seed=1", "nrow=5"]) == 0
    a, b = _read(tmp_path / "a.png"), _read(tmp_path / "b.png")
    assert a.shape == (3 * 34 + 2, 4 * 34 + 2, 3) and b.shape == (2 * 34 + 2, 5 * 34 + 2, 3)
    assert np.array_equal(a[2:34, 2:34], b[2:34, 2:34])    # same seed, same first image
    assert cli.main([*base, f"out={tmp_path / 'c.npz'}", "seed=2"]) == 0
    assert cli.main([*base, f"out={tmp_path / 'folder'}", "seed=2"]) == 0
    images = np.load(tmp_path / "c.npz")["images"]
    assert images.shape == (10, 32, 32, 3) and images.dtype == np.uint8
    assert np.array_equal(_read(tmp_path / "folder" / "00009.png"), images[9])
    capsys.readouterr()
    assert cli.main(["generate", "model=dcgan_cifar10", f"out={tmp_path / 'x.png'}"]) == 2
    assert "generate: give weights=FILE" in capsys.readouterr().err


def test_gan_recipes_compose_to_their_references():
    for name, loss, n_critic, clip, betas in (("dcgan_cifar10", "ns", 5, None, [0.0, 0.9]),
                                              ("wgan_cifar10", "wasserstein", 5, 0.03,
                                               [0.0, 0.9]),
                                              ("dcgan_cnn32_cifar10", "ns", 1, None, [0.5, 0.9]),
                                              ("wgan_cnn32_cifar10", "wasserstein", 1, 0.1,
                                               [0.0, 0.9])):
        cfg = compose("train", [f"experiment={name}"])
        task = gan.GANTask(**{k: v for k, v in cfg.task.items() if k != "_target_"})
        assert (task.loss, task.n_critic, task.clip) == (loss, n_critic, clip)
        assert list(cfg.optim.betas) == betas and cfg.optim.lr == 2e-4
        assert cfg.trainer.max_iters == 100000 and cfg.trainer.max_epochs is None
        assert cfg.model.name == name and cfg.data.mean == [127.5] * 3
