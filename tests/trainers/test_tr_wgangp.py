"""WGAN-GP on the GAN task: the gradient penalty against closed forms and finite
differences, smoke_wgangp trains with finite losses and a positive penalty and resumes
bit-identical, and wgangp_cifar10 composes to pytorch-gan-collections' settings."""
import json

import numpy as np
import pytest
from tr_helpers import Crash, CrashAt, assert_same_state, build_with_hooks

import tianyuan as ty
import tianyuan.functional as F
from tianyuan.trainers import gan, train
from tianyuan.trainers.config import compose


@pytest.fixture(autouse=True)
def _threads():
    count = ty.get_num_threads()
    yield
    ty.set_num_threads(count)


def test_penalty_of_a_linear_critic_is_the_closed_form():
    # D(x) = <w, x>: the gradient is w at every x, so the penalty is weight (|w| - 1)^2 and
    # its gradient 2 weight (|w| - 1) w / |w|
    rng = np.random.default_rng(0)
    w = ty.tensor(rng.standard_normal((1, 12)), dtype=ty.float64, requires_grad=True)
    critic = lambda x: F.linear(x.reshape(x.shape[0], -1), w)          # noqa: E731
    real, fake = (ty.tensor(rng.standard_normal((4, 3, 2, 2))) for _ in range(2))
    penalty = gan.gradient_penalty(critic, real.double(), fake.double(), weight=10.0)
    norm = np.linalg.norm(w.numpy())
    assert penalty.item() == pytest.approx(10 * (norm - 1) ** 2, rel=1e-12)
    penalty.backward()
    np.testing.assert_allclose(w.grad.numpy(), 20 * (norm - 1) * w.numpy() / norm, rtol=1e-10)


def _critic(params):
    w1, w2, wl = params
    def critic(x):
        h = F.leaky_relu(F.conv2d(x, w1, stride=2, padding=1), 0.1)
        return F.linear(F.flatten(F.relu(F.conv2d(h, w2, padding=1)) * h, 1), wl)
    return critic


def test_penalty_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s) for s in ((3, 2, 4, 4), (3, 3, 3, 3), (1, 12))]
    real, fake = (ty.tensor(rng.standard_normal((3, 2, 4, 4)), dtype=ty.float64)
                  for _ in range(2))

    def penalty(arrs, requires_grad=False):
        params = [ty.tensor(a, requires_grad=requires_grad) for a in arrs]
        ty.manual_seed(5)                                       # the same interpolation
        return gan.gradient_penalty(_critic(params), real, fake, weight=10.0), params

    value, params = penalty(arrays, True)
    assert value.item() > 0
    value.backward()
    eps = 1e-6
    for k, (a, p) in enumerate(zip(arrays, params)):
        expected = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + eps
            plus = penalty(arrays)[0].item()
            a[i] = old - eps
            minus = penalty(arrays)[0].item()
            a[i] = old
            expected[i] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(p.grad.numpy(), expected, rtol=1e-5, atol=1e-7,
                                   err_msg=f"penalty gradient of parameter {k}")


def wgangp_cfg(shapes_root, out_dir, *overrides):
    return compose("train", ["experiment=smoke_wgangp", f"data.root={shapes_root}",
                             f"out_dir={out_dir}", "trainer.progress=false",
                             "data.batch_size=8", "trainer.max_iters=4", "trainer.num_threads=1",
                             "model.ngf=8", "model.ndf=8", "task.samples.every=0",
                             *overrides])


def test_smoke_wgangp_trains_with_a_positive_penalty(shapes_root, tmp_path):
    result = train.run(wgangp_cfg(shapes_root, tmp_path, "trainer.log_every=1"))
    assert result["iterations"] == 4
    steps = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    steps = [s for s in steps if "loss_gp" in s]
    assert [s["iter"] for s in steps] == [1, 2, 3, 4]
    for s in steps:
        assert np.isfinite([s["loss_d"], s["loss_g"], s["loss_gp"]]).all()
        assert s["loss_gp"] > 0


def test_wgangp_killed_and_resumed_bit_identical(shapes_root, tmp_path):
    extra = ["trainer.checkpoint_every=2", "task.generator_batch=4"]
    reference = build_with_hooks(wgangp_cfg(shapes_root, tmp_path / "ref", *extra))
    reference.train()
    crashing = build_with_hooks(wgangp_cfg(shapes_root, tmp_path / "run", *extra), CrashAt(3))
    with pytest.raises(Crash):
        crashing.train()
    resumed = build_with_hooks(wgangp_cfg(shapes_root, tmp_path / "run", *extra))
    assert resumed.resume() is not None and resumed.iter == 2
    resumed.train()
    assert resumed.iter == 4
    assert_same_state(resumed.model.state_dict(), reference.model.state_dict())


def test_wgangp_recipe_composes_to_the_reference():
    cfg = compose("train", ["experiment=wgangp_cifar10"])
    task = gan.GANTask(**{k: v for k, v in cfg.task.items() if k != "_target_"})
    assert (task.loss, task.gp_weight, task.n_critic, task.clip) == ("wgan-gp", 10.0, 1, None)
    assert task.generator_batch == 256 and cfg.data.batch_size == 128
    assert list(cfg.optim.betas) == [0.0, 0.9] and cfg.optim.lr == 2e-4
    assert cfg.trainer.max_iters == 100000 and cfg.model.name == "wgan_cnn32_cifar10"
    assert cfg.model.nz == 100
