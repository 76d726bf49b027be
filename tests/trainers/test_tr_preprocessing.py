"""Which preprocessing `tianyuan eval` and `tianyuan quantize` take: the data config's where
the user set it, else the model card's, and one line where the two disagree."""
import pytest

from tianyuan.trainers.commands import _card, choose_preprocessing
from tianyuan.trainers.config import compose

SMALL = ["data.image_size=32", "data.resize=null", "data.mean=[125,123,114]",
         "data.std=[63,62,66]"]


def _choose(capsys, *overrides, command="eval"):
    cfg = compose(command, ["model=resnet18", "data=folder", "data.root=/nowhere", *overrides])
    pre, source = choose_preprocessing(cfg, _card(cfg.model), command)
    return pre, source, capsys.readouterr().out


@pytest.mark.parametrize("command", ["eval", "quantize"])
def test_data_preprocessing_the_user_set_wins_and_the_run_says_so(capsys, command):
    pre, source, said = _choose(capsys, *SMALL, command=command)
    assert source == "data config"
    assert pre == {"resize": None, "crop": 32, "mean": (125.0, 123.0, 114.0),
                   "std": (63.0, 62.0, 66.0)}
    assert said.count("\n") == 1 and said.startswith(f"{command}: preprocessing from the data")
    assert "resize 256, crop 224" in said and "preprocessing=card" in said


def test_one_key_set_is_enough(capsys):
    pre, source, said = _choose(capsys, "data.image_size=64")
    assert source == "data config" and pre["crop"] == 64 and "preprocessing=card" in said


def test_untouched_data_config_takes_the_card_quietly(capsys):
    pre, source, said = _choose(capsys)
    assert source == "model card" and pre["crop"] == 224 and pre["resize"] == 256
    assert said == ""          # the card and folder.yaml agree: nothing to say


def test_card_wins_over_an_untouched_data_config_that_differs(capsys):
    cfg = compose("eval", ["model=shufflenet_v2_x1_5", "data=folder", "data.root=/nowhere"])
    card = _card(cfg.model)
    pre, source = choose_preprocessing(cfg, card)
    said = capsys.readouterr().out
    assert source == "model card" and pre["resize"] == card["preprocessing"]["resize"]
    assert "preprocessing=data" in said


def test_explicit_choices(capsys):
    pre, source, said = _choose(capsys, *SMALL, "preprocessing=card")
    assert source == "model card" and pre["crop"] == 224 and said == ""
    pre, source, said = _choose(capsys, "preprocessing=data")
    assert source == "data config" and said == ""
    with pytest.raises(ValueError, match="preprocessing must be"):
        _choose(capsys, "preprocessing=cards")


def test_data_without_a_card_takes_its_own(capsys):
    cfg = compose("eval", ["model=resnet18", "data=cifar10", "data.root=/nowhere"])
    pre, source = choose_preprocessing(cfg, _card(cfg.model))
    assert source == "data config" and pre["crop"] == cfg.data.image_size
    cfg = compose("eval", ["model=resnet18", "data=cifar10", "data.root=/nowhere",
                           "preprocessing=card"])
    with pytest.raises(ValueError, match="no model card applies"):
        choose_preprocessing(cfg, _card(cfg.model))
