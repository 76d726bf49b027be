"""Fine-tune preparation and the iteration-based schedules."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn, optim
from tianyuan.trainers import schedules
from tianyuan.trainers.classification import prepare_finetune


class _Tiny(nn.Module):
    classifier_name = "fc"

    def __init__(self, num_classes=5):
        super().__init__()
        self.body = nn.Linear(4, 6)
        self.fc = nn.Linear(6, num_classes)

    def reset_classifier(self, n):
        self.fc = nn.Linear(6, n)

    def forward(self, x):
        return self.fc(self.body(x))


def test_finetune_new_head_frozen_backbone(tmp_path):
    source = _Tiny(5)
    path = str(tmp_path / "w.safetensors")
    ty.save({"model": source.state_dict()}, path)      # a checkpoint: its "model" is used
    model = _Tiny(5)
    params = prepare_finetune(model, path, num_classes=3, freeze_backbone=True)
    assert np.array_equal(model.body.weight.numpy(), source.body.weight.numpy())
    assert model.fc.weight.shape == (3, 6)
    assert [p.shape for p in params] == [(3, 6), (3,)]
    assert not model.body.weight.requires_grad


def test_finetune_refuses_foreign_weights(tmp_path):
    path = str(tmp_path / "w.safetensors")
    ty.save({"other.weight": np.zeros((2, 2), np.float32)}, path)
    with pytest.raises(RuntimeError, match="does not fit"):
        prepare_finetune(_Tiny(), path, num_classes=3)


def _lrs(scheduler, steps):
    out = [scheduler.get_last_lr()[0]]
    for _ in range(steps):
        scheduler.step()
        out.append(scheduler.get_last_lr()[0])
    return np.array(out)


def test_schedules_in_iterations():
    def opt():
        return optim.SGD([ty.zeros(2, requires_grad=True)], lr=1.0)
    lrs = _lrs(schedules.multistep(opt(), 4, 10, milestones=[1, 3]), 40)
    assert lrs[9] == 1.0 and lrs[10] == pytest.approx(0.1) and lrs[30] == pytest.approx(0.01)
    lin = _lrs(schedules.linear(opt(), 2, 5), 10)
    assert lin[0] == 1.0 and lin[5] == pytest.approx(0.5) and lin[10] == 0.0
    exp = _lrs(schedules.exponential(opt(), 3, 4, gamma=0.5), 8)
    assert exp[3] == 1.0 and exp[4] == 0.5 and exp[8] == 0.25
    warm = _lrs(schedules.cosine(opt(), 2, 10, warmup_epochs=0.5, warmup_factor=0.1), 20)
    assert warm[0] == pytest.approx(0.1) and warm[20] == pytest.approx(0.0, abs=1e-12)
