"""`tianyuan generate`: images of a trained or published GAN generator, as one grid PNG, a
folder of PNGs (for an external FID) or an .npz of uint8 images.

    tianyuan generate model=dcgan_cifar10 weights=runs/dcgan_cifar10/best.safetensors
    tianyuan generate model=dcgan_cifar10 weights=dcgan_cifar10.cifar10_megengine n=100 \\
        out=grid.png seed=1
    tianyuan generate model=dcgan_cifar10 model.ngf=32 model.ndf=32 \\
        weights=runs/smoke_gan/model_final.safetensors out=samples/ n=1000

The noise is a function of `seed` alone; images are drawn in eval mode (BN's running
statistics), from the averaged generator where the weights hold one (`ema=true`).
"""
import os
import sys

import numpy as np
from hydra.utils import instantiate

from tianyuan.evaluation.report import format_table

from .config import compose, usage, use_threads
from .gan import fixed_noise, generate, make_grid, to_uint8, write_png


def build_gan(model_cfg, weights):
    """The configured GAN with `weights` (a file or a manifest name, the builder loads it)."""
    if not weights:
        raise ValueError("generate: give weights=FILE (a run's best.safetensors or "
                         "model_final.safetensors) or a manifest name (`tianyuan weights list`)")
    model = instantiate(model_cfg, weights=weights)
    if not hasattr(model, "sampler"):
        raise ValueError(f"generate: model={model_cfg.get('name', model_cfg._target_)} is not "
                         "a GAN; the generation models: dcgan_cifar10, wgan_cifar10, "
                         "dcgan_cnn32_cifar10, wgan_cnn32_cifar10")
    return model


def save_images(images, out, nrow=None):
    """Write (N, 3, H, W) images in [-1, 1] to `out`: a grid (.png), an .npz of uint8
    (N, H, W, 3) "images", or a folder of 00000.png, 00001.png, ..."""
    if out.lower().endswith(".png"):
        return write_png(out, make_grid(images, nrow))
    if out.lower().endswith(".npz"):
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        np.savez(out, images=to_uint8(images))
        return out
    for i, image in enumerate(to_uint8(images)):
        write_png(os.path.join(out, f"{i:05d}.png"), image)
    return out


def run(cfg):
    """Generate cfg.n images and write them to cfg.out; returns a summary dict."""
    use_threads(cfg.num_threads)
    if int(cfg.n) < 1:
        raise ValueError(f"generate: n must be >= 1, got {cfg.n}")
    model = build_gan(cfg.model, cfg.weights)
    generator = model.sampler() if cfg.ema else model.generator
    noise = fixed_noise(int(cfg.n), model.nz, int(cfg.seed))
    images = generate(generator, noise, int(cfg.batch_size))
    path = save_images(images, str(cfg.out), cfg.nrow)
    averaged = generator is not model.generator
    result = {"model": cfg.model.get("name", cfg.model._target_), "weights": cfg.weights,
              "images": len(images), "seed": int(cfg.seed), "generator": "ema" if averaged
              else "generator", "out": path}
    print(format_table([result], title="\ngenerate"))
    return result


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(usage("generate", "generate", ("model",)))
        return 0
    run(compose("generate", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
