"""The Trainer runs a task: a toy two-optimizer task (a WGAN on 2-D points, critic and
generator) trains counted in iterations, logs both losses, and a run killed mid-way resumes
bit-identical; a data config that is only a `_target_` goes through train, eval and
quantize alike."""
import json

import numpy as np
import pytest
from omegaconf import OmegaConf
from tr_helpers import Crash, CrashAt, assert_same_state

import tianyuan as ty
from tianyuan import nn
from tianyuan.datasets import DataLoader
from tianyuan.trainers import commands, quantize, schedules, train
from tianyuan.trainers.checkpoint import CheckpointHook, list_checkpoints
from tianyuan.trainers.config import compose
from tianyuan.trainers.engine import Trainer
from tianyuan.trainers.task import Task


class Points:
    """A ring of 2-D points, as dataset items {"image": (2,) float32}."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        angle = 2 * np.pi * i / 24
        return {"image": np.array([np.cos(angle), np.sin(angle)], np.float32)}


class ToyGAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
        self.critic = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))


class ToyWGAN(Task):
    """WGAN with weight clipping (Arjovsky et al. 2017): the critic steps every batch, the
    generator every `n_critic`-th."""

    name = "toy_wgan"

    def __init__(self, n_critic=2, clip=0.1):
        self.n_critic, self.clip = n_critic, clip

    def optimizers(self, cfg, model):
        return {"critic": ty.optim.SGD(model.critic.parameters(), lr=0.05, momentum=0.9),
                "generator": ty.optim.SGD(model.generator.parameters(), lr=0.05, momentum=0.9)}

    def run_step(self, trainer, batch):
        model, real = trainer.model, ty.tensor(batch["image"])
        noise = ty.tensor(np.random.standard_normal(real.shape).astype(np.float32))
        fake = model.generator(noise).detach()
        logs = trainer.optimize({"loss_critic": model.critic(fake).mean() -
                                 model.critic(real).mean()}, "critic")
        for p in model.critic.parameters():
            np.clip(p.data, -self.clip, self.clip, out=p.data)
        if (trainer.iter + 1) % self.n_critic == 0:
            noise = ty.tensor(np.random.standard_normal(real.shape).astype(np.float32))
            logs.update(trainer.optimize(
                {"loss_gen": -model.critic(model.generator(noise)).mean()}, "generator"))
        return logs


def _gan_trainer(out, *hooks):
    np.random.seed(0)
    ty.manual_seed(0)
    task, model = ToyWGAN(), ToyGAN()
    optimizers = task.optimizers(None, model)
    # 24 points at batch 8: 3 batches a pass; 10 iterations span 4 passes (epochs)
    loader = DataLoader(Points(), batch_size=8, shuffle=True, seed=5, drop_last=True)
    scheds = {name: schedules.multistep(opt, 1, 10, milestones=[6], unit="iter",
                                        warmup_iters=3) for name, opt in optimizers.items()}
    return Trainer(task, model, optimizers, loader, None, out, max_iters=10,
                   schedulers=scheds, hooks=[CheckpointHook(every=4), *hooks], log_every=2,
                   progress=False)


def test_two_optimizers_train_log_both_losses_and_resume_bit_identical(tmp_path):
    reference = _gan_trainer(str(tmp_path / "ref"))
    reference.train()
    assert (reference.iter, reference.epoch, reference.max_epochs) == (10, 3, 4)   # 3 whole
    logged = [json.loads(line) for line in open(tmp_path / "ref" / "log.jsonl")]
    steps = [r for r in logged if "iter" in r and "loss_critic" in r]
    assert [r["iter"] for r in steps] == [2, 4, 6, 8, 10]
    assert all(np.isfinite(r["loss_critic"]) and np.isfinite(r["loss_gen"]) for r in steps)

    crashing = _gan_trainer(str(tmp_path / "run"), CrashAt(7))       # in the third pass
    with pytest.raises(Crash):
        crashing.train()
    assert [i for i, _ in list_checkpoints(str(tmp_path / "run" / "checkpoints"))] == [3, 4, 6]
    resumed = _gan_trainer(str(tmp_path / "run"))
    assert resumed.resume() is not None and resumed.iter == 6
    resumed.train()
    assert resumed.iter == 10
    assert_same_state(resumed.model.state_dict(), reference.model.state_dict())
    for name in ("critic", "generator"):
        ours = resumed.optimizers[name].state_dict()
        theirs = reference.optimizers[name].state_dict()
        assert ours["param_groups"][0]["lr"] == theirs["param_groups"][0]["lr"]
        for key, state in ours["state"].items():
            assert np.array_equal(state["momentum_buffer"],
                                  theirs["state"][key]["momentum_buffer"])


def test_iteration_schedule_warms_up_then_steps():
    opt = ty.optim.SGD([nn.Parameter(np.zeros(1, np.float32))], lr=1.0)
    sched = schedules.multistep(opt, epochs=1, iters_per_epoch=10, milestones=[6],
                                unit="iter", warmup_iters=3, warmup_factor=0.1)
    lrs = []
    for _ in range(8):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    assert lrs[0] == pytest.approx(0.1) and lrs[1] < lrs[2] < 1.0
    assert lrs[3:6] == [1.0] * 3 and lrs[6:] == pytest.approx([0.1, 0.1])


def test_a_checkpoint_of_other_optimizers_is_refused(tmp_path):
    trainer = _gan_trainer(str(tmp_path))
    state = trainer.state_dict()
    state["optimizers"] = {"main": state["optimizers"]["critic"]}
    with pytest.raises(ValueError, match=r"optimizers \['main'\], this run \['critic', "):
        trainer.load_state_dict(state)


# ---------------------------------------------------------------- a data builder of one's own
def my_data(seed=0):
    """A user's data builder: (train loader, val loader, classes), no other settings."""
    from tianyuan.trainers.classification import classification_data
    return classification_data("shapes", None, batch_size=16, image_size=32, resize=None,
                               mean=(127.5,) * 3, std=(64.0,) * 3, augment="flip",
                               val_batch_size=50, seed=seed,
                               synthetic={"num_per_class": 4, "val_per_class": 2, "size": 32,
                                          "num_classes": 10, "seed": 0})


def _own_data(cfg):
    cfg.data = OmegaConf.create({"_target_": f"{__name__}.my_data"})
    return cfg


def test_a_target_only_data_config_in_train_eval_and_quantize(tmp_path, monkeypatch):
    monkeypatch.setenv("TIANYUAN_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    cfg = compose("train", ["experiment=smoke_shapesnet", f"out_dir={run}",
                            "trainer.max_iters=3", "trainer.progress=false"])
    result = train.run(_own_data(cfg))
    assert result["iterations"] == 3 and "best_top1" in result
    weights = str(run / "model_final.safetensors")
    cfg = compose("eval", ["model=shapesnet", f"weights={weights}", "progress=false",
                           f"out={tmp_path / 'eval.json'}"])
    result = commands.evaluate(_own_data(cfg))
    assert result["images"] == 20 and result["classes"] == 10
    cfg = compose("quantize", ["model=shapesnet", f"weights={weights}", "method=both",
                               "calib_batches=1", "qat.iters=2", "trainer.progress=false",
                               f"out_dir={tmp_path / 'qat'}", "report.repeats=1",
                               "report.batches=[1]", "report.sensitivity_images=4",
                               f"out={tmp_path / 'quant.json'}"])
    report = quantize.run(_own_data(cfg))
    assert [r["model"] for r in report.rows] == ["float", "ptq", "qat"]
