"""Every experiment composes, and its optimizer and schedule instantiate for a tiny model."""
import re

import pytest
from hydra.utils import instantiate

import tianyuan as ty
from tianyuan.trainers.config import compose, options, to_dict

EXPERIMENTS = options("experiment")


def test_recipes_present():
    for name in ("resnet50_imagenet", "shufflenet_v2_x1_0_imagenet", "shufflenet_v1_imagenet",
                 "mobilenet_v2_imagenet", "resnet18_imagenet_qat", "shufflenet_v1_imagenet_qat",
                 "mobilenet_v2_imagenet_qat", "resnet18_cifar10", "mobilenet_v2_cifar10",
                 "smoke_shapesnet", "smoke_resnet18", "smoke_resnet18_qat"):
        assert name in EXPERIMENTS


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes(name):
    cfg = compose("train", [f"experiment={name}"])
    assert cfg.name == name and to_dict(cfg)["optim"]["lr"] > 0
    optimizer = instantiate(cfg.optim)([ty.zeros(3, requires_grad=True)])
    epochs = cfg.trainer.max_epochs or cfg.trainer.max_iters / 7   # null: counted in iterations
    scheduler = instantiate(cfg.schedule)(optimizer, epochs=epochs, iters_per_epoch=7)
    scheduler.step()
    assert scheduler.get_last_lr()[0] >= 0


def test_recipe_numbers():
    r50 = to_dict(compose("train", ["experiment=resnet50_imagenet", "data.batch_size=512"]))
    assert r50["optim"]["lr"] == pytest.approx(0.2)              # 0.1 x 512 / 256
    assert r50["optim"]["weight_decay"] == 1e-4 and r50["schedule"]["milestones"] == [30, 60, 80]
    v2 = to_dict(compose("train", ["experiment=shufflenet_v2_x1_0_imagenet"]))
    assert v2["optim"]["weight_decay"] == 4e-5 and v2["task"]["label_smoothing"] == 0.1
    qat = to_dict(compose("train", ["experiment=resnet18_imagenet_qat"]))
    assert qat["quant"]["method"] == "qat" and qat["optim"]["lr"] == 1.25e-4


def test_zoo_models_configured():
    zoo = pytest.importorskip("tianyuan.zoo")
    for name in options("model"):
        cfg = compose("train", [f"model={name}"])
        if cfg.model._target_ == "tianyuan.zoo.get_model":
            assert cfg.model.name in zoo.list_models()


def test_none_is_refused_for_null(tmp_path, monkeypatch, capsys):
    # hydra reads None as the string "None": data.root=None had made a dataset in ./None
    from tianyuan.trainers import cli
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIANYUAN_TRACEBACK", raising=False)
    with pytest.raises(ValueError, match=r"^data\.root=None: .* write data\.root=null$"):
        compose("eval", ["model=shapesnet", "data=shapes", "data.root=None"])
    assert compose("eval", ["model=shapesnet", "data=shapes", "data.root=null"]).data.root is None
    assert cli.main(["eval", "model=shapesnet", "data=shapes", "data.root=none"]) == 2
    assert "data.root=none: hydra reads none" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("old, new", [("finetune.weights=w.safetensors",
                                       "task.finetune.weights=w.safetensors"),
                                      ("loss.label_smoothing=0.1", "task.label_smoothing=0.1"),
                                      ("topk=[1]", "task.topk=[1]")])
def test_a_moved_key_names_its_new_place(old, new):
    with pytest.raises(ValueError, match=re.escape(f"(write {new})")):
        compose("train", [old])


def test_qconfig_presets_are_one_registry():
    from tianyuan import quantization as Q
    assert Q.get_qconfig("calibration") is Q.calibration_qconfig
    assert set(Q.QCONFIGS) >= {"ema_fakequant", "calibration", "lsq", "int8_symmetric"}
    with pytest.raises(ValueError, match="unknown qconfig 'emma'; presets: "):
        Q.get_qconfig("emma")


@pytest.mark.parametrize("override, near", [("trainer.epochz=3", "trainer.max_epochs"),
                                            ("data.rooot=/x", "data.root"),
                                            ("optim.lrr=0.1", "optim.lr")])
def test_a_mistyped_key_gets_the_nearest_real_one(override, near):
    """hydra's own hint ('use +trainer.epochz=3') would add the typo as a new key."""
    with pytest.raises(ValueError, match=re.escape(f"did you mean {near}?")):
        compose("train", ["experiment=smoke_shapesnet", override])
