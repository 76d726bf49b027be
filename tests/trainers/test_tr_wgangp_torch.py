"""Optional: one WGAN-GP critic step equals PyTorch's (pytorch-gan-collections' wgangp.py:
Wasserstein loss + 10 x cacl_gradient_penalty, Adam 2e-4 betas (0, 0.9)) on the same CNN32
critic weights, batch and interpolation, within 1e-4 (skipped without torch)."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan.trainers import gan
from tianyuan.zoo import get_model

torch = pytest.importorskip("torch")
nn = torch.nn


def torch_critic():
    """pytorch-gan-collections source/models/wgangp.py Discriminator32, the same names."""
    layers, in_ch = [], 3
    for width, out_ch in ((64, 128), (128, 256), (256, 512)):
        layers += [nn.Conv2d(in_ch, width, 3, 1, 1), nn.LeakyReLU(0.1),
                   nn.Conv2d(width, out_ch, 4, 2, 1), nn.LeakyReLU(0.1)]
        in_ch = out_ch
    critic = nn.Module()
    critic.main = nn.Sequential(*layers, nn.Conv2d(512, 512, 3, 1, 1), nn.LeakyReLU(0.1))
    critic.linear = nn.Linear(4 * 4 * 512, 1)
    critic.forward = lambda x: critic.linear(torch.flatten(critic.main(x), start_dim=1))
    return critic


def torch_penalty(net_d, real, fake, t):
    """cacl_gradient_penalty of wgangp.py with its torch.rand replaced by our t."""
    t = t.expand(real.size())
    interpolates = (t * real + (1 - t) * fake).requires_grad_(True)
    disc = net_d(interpolates)
    grad = torch.autograd.grad(outputs=disc, inputs=interpolates,
                               grad_outputs=torch.ones_like(disc), create_graph=True,
                               retain_graph=True)[0]
    norm = torch.norm(torch.flatten(grad, start_dim=1), dim=1)
    return torch.mean((norm - 1) ** 2)


def close(got, want, what, floor=1.0):
    """got == want to 1e-4, relative and against want's largest magnitude (at least
    `floor`: gradients, a few 1e-3 here, are held to their own scale)."""
    scale = max(floor, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, err_msg=what)


def test_wgangp_critic_step_equals_pytorch():
    torch.set_num_threads(1)
    ty.manual_seed(0)
    ours = get_model("wgan_cnn32_cifar10").discriminator
    theirs = torch_critic()
    theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})
    rng = np.random.default_rng(0)
    real, fake = (rng.uniform(-1, 1, (4, 3, 32, 32)).astype(np.float32) for _ in range(2))
    ty.manual_seed(7)
    t = ty.rand(4, 1, 1, 1).numpy()                  # the penalty's interpolation draw

    optim = ty.optim.Adam(ours.parameters(), lr=2e-4, betas=(0.0, 0.9))
    ty.manual_seed(7)
    loss_w = gan.wasserstein_discriminator(ours(ty.tensor(real)), ours(ty.tensor(fake)))
    gp = gan.gradient_penalty(ours, ty.tensor(real), ty.tensor(fake), weight=1.0)
    optim.zero_grad()
    (loss_w + gp * 10.0).backward()

    optim_t = torch.optim.Adam(theirs.parameters(), lr=2e-4, betas=(0.0, 0.9))
    real_t, fake_t = torch.tensor(real), torch.tensor(fake)
    loss_wt = -theirs(real_t).mean() + theirs(fake_t).mean()
    gp_t = torch_penalty(theirs, real_t, fake_t, torch.tensor(t))
    optim_t.zero_grad()
    (loss_wt + 10 * gp_t).backward()

    close(loss_w.item(), loss_wt.item(), "Wasserstein loss", floor=1e-6)
    close(gp.item(), gp_t.item(), "gradient penalty")
    assert gp.item() > 1e-3
    named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad.numpy(), named[name].grad.numpy(), f"gradient of {name}", floor=1e-6)
    optim.step()
    optim_t.step()
    for name, p in ours.named_parameters():
        close(p.numpy(), named[name].detach().numpy(), f"{name} after the Adam step")
