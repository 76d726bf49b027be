"""Every registered generation model: the generator's data path (noise -> [-1, 1] images),
the discriminator's score, gradients reaching both halves, names and shapes equal to the
weights spec (gan_maps.py), and the published files' layouts loading by name."""
import os
import pickle
import sys
from collections import OrderedDict

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import weights, zoo
from tianyuan.weights.cli import main as weights_cli
from tianyuan.weights.gan_maps import GAN_ARCHS, gan_spec, part_specs
from tianyuan.zoo.gan import load_gan_weights

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "weights"))
import pth_writer  # noqa: E402  (torch-free .pth files, shared with the weights tests)

GANS = zoo.list_models(task="generation")
SMALL = {"dcgan_cifar10": {"ngf": 16, "ndf": 16}, "wgan_cifar10": {"ngf": 16, "ndf": 16}}
_CACHE = {}


def cached(name):
    if name not in _CACHE:
        ty.manual_seed(0)
        _CACHE[name] = zoo.get_model(name).eval()
    return _CACHE[name]


def test_the_four_reference_pairs_are_registered():
    assert GANS == sorted(GAN_ARCHS)
    for name in GANS:
        card = zoo.model_card(name)
        assert card["task"] == "generation" and card["follows"] and card["loss"]
        assert 15 < card["metrics"][next(iter(card["metrics"]))]["fid"] < 50


@pytest.mark.parametrize("name", GANS)
def test_noise_to_images_in_range_and_a_score_each(name):
    gan = cached(name)
    with ty.no_grad():
        images = gan.generator(gan.noise(3))
        scores = gan.discriminator(images)
    assert images.shape == (3, 3, 32, 32) and scores.shape == (3, 1)
    x = images.numpy()
    assert np.isfinite(x).all() and x.min() >= -1 and x.max() <= 1
    assert gan(gan.noise(1)).shape == (1, 3, 32, 32)   # forward is the generator's


@pytest.mark.parametrize("name", GANS)
def test_state_dict_is_the_spec(name):
    state, spec = cached(name).state_dict(), gan_spec(name)
    assert list(state) == list(spec)
    for key, (shape, dtype) in spec.items():
        assert state[key].shape == shape and state[key].dtype == np.dtype(dtype), key
    assert zoo.model_card(name)["num_params"] == sum(p.size for p in cached(name).parameters())


@pytest.mark.parametrize("name", GANS)
def test_gradients_reach_both_halves(name):
    ty.manual_seed(0)
    gan = zoo.get_model(name, **SMALL.get(name, {})).train()
    gan.discriminator(gan.generator(gan.noise(4))).mean().backward()
    missing = [n for n, p in gan.named_parameters() if p.grad is None]
    assert not missing
    assert all(np.isfinite(p.grad.numpy()).all() for p in gan.parameters())


def test_dcgan_keeps_the_references_unit_range():
    """mimicry's DCGAN: sigmoid images in [0, 1], scored as such; ours gives 2s - 1 and
    scores (x + 1) / 2, the same numbers."""
    ty.manual_seed(0)
    gan = zoo.get_model("dcgan_cifar10", ngf=16, ndf=16).eval()
    z = gan.noise(2)
    g = gan.generator
    with ty.no_grad():
        h = g.block4(g.block3(g.block2(g.l1(z).reshape(2, 16, 4, 4))))
        unit = ty.functional.sigmoid(g.c5(g.act5(g.b5(h)))).numpy()      # the reference's
        ours = g(z).numpy()
    np.testing.assert_allclose((ours + 1) / 2, unit, atol=1e-6)


def _megengine_generator(arch, seed=1):
    """A generator state dict as megengine.save writes one: BN and conv-bias arrays
    (1, C, 1, 1), no num_batches_tracked."""
    rng = np.random.default_rng(seed)
    out = OrderedDict()
    for key, (shape, _) in part_specs(arch)["generator"].items():
        if key.endswith("num_batches_tracked"):
            continue
        value = rng.uniform(0.5, 1.5, shape) if key.endswith("running_var") else \
            rng.standard_normal(shape) * 0.05
        if len(shape) == 1 and not key.startswith("l1"):
            value = value.reshape(1, -1, 1, 1)
        out[key] = value.astype(np.float32)
    return out


def test_a_megengine_generator_pkl_loads_by_name(tmp_path):
    state = _megengine_generator("dcgan_cifar10")
    path = tmp_path / "dcgan_cifar.pkl"
    with open(path, "wb") as handle:
        pickle.dump(state, handle, protocol=2)
    converted = weights.load_weights(str(path), arch="dcgan_cifar10")
    assert set(converted) == set(gan_spec("dcgan_cifar10", ["generator"]))
    gan = zoo.get_model("dcgan_cifar10", weights=str(path))
    loaded = gan.state_dict()
    for key, value in state.items():
        np.testing.assert_array_equal(loaded[f"generator.{key}"], value.reshape(-1)
                                      if value.ndim == 4 and value.shape[0] == 1 else value)


def _random(spec, rng):
    return OrderedDict((k, np.asarray(rng.integers(0, 9), np.int64) if d == "int64" else
                        rng.standard_normal(s).astype(np.float32) * 0.05)
                       for k, (s, d) in spec.items())


def _tensors(state, tag):
    return OrderedDict((k, pth_writer.contiguous(f"{tag}{i}", v))
                       for i, (k, v) in enumerate(state.items()))


def test_a_pytorch_gan_collections_checkpoint_loads_both_halves(tmp_path):
    rng = np.random.default_rng(2)
    parts = {p: _random(s, rng) for p, s in part_specs("wgan_cnn32_cifar10").items()}
    checkpoint = {"net_G": _tensors(parts["generator"], "g"),
                  "net_D": _tensors(parts["discriminator"], "d"),
                  "optim_G": {"state": {}, "param_groups": [{"lr": 2e-4, "betas": (0.0, 0.9)}]}}
    path = tmp_path / "model.pt"
    pth_writer.write_zip(path, checkpoint)
    out = tmp_path / "wgan.safetensors"
    assert weights_cli(["import", str(path), "--arch", "wgan_cnn32_cifar10", "--out",
                        str(out)]) == 0
    gan = zoo.get_model("wgan_cnn32_cifar10", weights=str(out))
    state = gan.state_dict()
    for part, values in parts.items():
        for key, value in values.items():
            np.testing.assert_array_equal(state[f"{part}.{key}"], value)


def test_a_file_of_another_gan_names_its_keys():
    with pytest.raises(KeyError, match="unmapped keys"):
        weights.convert_state_dict(_megengine_generator("dcgan_cifar10"), "wgan_cnn32_cifar10")


def test_generator_only_and_averaged_weights_load_into_their_parts():
    ty.manual_seed(0)
    source = zoo.get_model("wgan_cifar10", ngf=16, ndf=16)
    target = zoo.get_model("wgan_cifar10", ngf=16, ndf=16)
    before = target.discriminator.state_dict()
    state = {f"generator.{k}": v for k, v in source.generator.state_dict().items()}
    state.update({f"generator_ema.{k}": v * 2 for k, v in source.generator.state_dict().items()
                  if v.dtype == np.float32})
    state.update({f"generator_ema.{k}": v for k, v in source.generator.state_dict().items()
                  if v.dtype != np.float32})
    assert load_gan_weights(target, state) == ["generator", "generator_ema"]
    assert target.sampler() is target.generator_ema
    np.testing.assert_array_equal(target.generator_ema.l1.weight.numpy(),
                                  2 * source.generator.l1.weight.numpy())
    assert all(np.array_equal(v, before[k]) for k, v in target.discriminator.state_dict().items())
    with pytest.raises(ValueError, match="not under generator"):
        load_gan_weights(target, {"l1.weight": np.zeros(1)})
