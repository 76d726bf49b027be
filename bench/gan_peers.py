"""PyTorch's side of bench_gan.py, run in a child process (blas_env.in_child) and importing no
tianyuan: the DCGAN training iteration of pytorch-gan-collections (source/models/dcgan.py's
CNN32 pair, our zoo/gan/cnn32.py's layers and names, so our state dict loads strictly) and
pytorch-fid's `InceptionV3([3])`. Each function takes our weights as numpy arrays and returns
images/s from the median of `repeat` timed calls after one warm-up (None without torch).
"""
import time

import numpy as np


def _median_s(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _dcgan_cnn32(torch, nz=100):
    """A module with .generator and .discriminator, zoo/gan/cnn32.py's layers and names."""
    nn = torch.nn
    g = [nn.ConvTranspose2d(nz, 1024, 2, 1, 0, bias=False)]                # (N, 1024, 2, 2)
    for in_ch, out_ch in ((1024, 512), (512, 256), (256, 128), (128, 3)):
        g += [nn.BatchNorm2d(in_ch), nn.ReLU(True), nn.ConvTranspose2d(in_ch, out_ch, 4, 2, 1,
                                                                        bias=False)]
    d = [nn.Conv2d(3, 64, 5, 2, 2, bias=False), nn.LeakyReLU(0.2, True)]
    for in_ch, out_ch in ((64, 128), (128, 256), (256, 512)):
        d += [nn.Conv2d(in_ch, out_ch, 5, 2, 2, bias=False), nn.LeakyReLU(0.2, True),
              nn.BatchNorm2d(out_ch)]

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(*g, nn.Tanh())

        def forward(self, z):
            return self.main(z.view(-1, nz, 1, 1))

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(*d)
            self.linear = nn.Linear(2 * 2 * 512, 1)

        def forward(self, x):
            return self.linear(torch.flatten(self.main(x), 1))

    gan = nn.Module()
    gan.generator, gan.discriminator = Generator(), Discriminator()
    return gan


def dcgan_train(state, batch, repeat, threads):
    """Images/s of pytorch-gan-collections' DCGAN iteration (dcgan.py's train loop): a
    discriminator step on `batch` real and `batch` generated images, then a generator step
    on `batch` noise vectors with the discriminator frozen (requires_grad False, as the
    reference does), BCE-with-logits, Adam 2e-4 betas (0.5, 0.999), the losses read out."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    gan = _dcgan_cnn32(torch)
    gan.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in state.items()})
    g, d = gan.generator.train(), gan.discriminator.train()
    opt_g = torch.optim.Adam(g.parameters(), 2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), 2e-4, betas=(0.5, 0.999))
    bce = torch.nn.BCEWithLogitsLoss()
    real = torch.rand(batch, 3, 32, 32) * 2 - 1
    ones, zeros = torch.ones(batch, 1), torch.zeros(batch, 1)

    def step():
        with torch.no_grad():
            fake = g(torch.randn(batch, 100)).detach()
        loss_d = bce(d(real), ones) + bce(d(fake), zeros)
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        for p in d.parameters():
            p.requires_grad_(False)
        loss_g = bce(d(g(torch.randn(batch, 100))), ones)
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        for p in d.parameters():
            p.requires_grad_(True)
        return loss_d.item(), loss_g.item()
    return batch / _median_s(step, repeat)


def fid_features(state, images, repeat, threads):
    """Images/s of pytorch-fid's InceptionV3([3]) (the 2048-d pool, resized to 299 and scaled
    to [-1, 1] inside) on `images` (N, 3, H, W) in [0, 1], no_grad as its
    calculate_activations. Its FID weights cannot be downloaded here: `fid_inception_v3`'s
    load_state_dict_from_url is replaced by one returning `state` (our FIDInception's)."""
    try:
        import torch
        from pytorch_fid import inception
    except ImportError:
        return None
    torch.set_num_threads(threads)
    tensors = {k: torch.from_numpy(np.asarray(v)) for k, v in state.items()}
    inception.load_state_dict_from_url = lambda *args, **kwargs: tensors
    model = inception.InceptionV3([3]).eval()
    x = torch.from_numpy(images)

    def run():
        with torch.no_grad():
            return model(x)[0]
    return len(images) / _median_s(run, repeat)
