"""The model registry and the model cards."""
import os
import re

import pytest

from tianyuan import nn, weights, zoo
from zoo_cases import MODELS, TORCHVISION_ARCHS

PAPER_VARIANTS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                  "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5",
                  "shufflenet_v2_x2_0", "mobilenet_v2", "shufflenet_v1", "shufflenet_v1_x1_0_g3",
                  "shufflenet_v1_x1_5_g3", "shufflenet_v1_x1_0_g8"]


def test_every_paper_variant_is_registered_and_exported():
    for name in PAPER_VARIANTS:
        assert name in zoo.list_models()
        assert zoo.get_builder(name) is getattr(zoo, name)


def test_list_models_is_sorted_and_filters():
    assert zoo.list_models() == sorted(zoo.list_models())
    assert zoo.list_models("resnet*") == ["resnet101", "resnet152", "resnet18", "resnet34",
                                          "resnet50"]


def test_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="already registered"):
        zoo.register_model("resnet18", lambda **kw: None)
    with pytest.raises(ValueError, match="already registered"):
        zoo.register_model("resnet18")(lambda **kw: None)


def test_register_get_unregister_a_user_model():
    @zoo.register_model("tiny_test_net", card=zoo.classification_card(input_size=(3, 8, 8)))
    def tiny_test_net(num_classes=2):
        return nn.Linear(4, num_classes)

    try:
        assert zoo.get_model("tiny_test_net", num_classes=3).out_features == 3
        card = zoo.model_card("tiny_test_net")
        assert card["input_size"] == (3, 8, 8)
        assert card["num_params"] == 10   # the default build: 4 * 2 + 2
    finally:
        zoo.unregister_model("tiny_test_net")
    assert "tiny_test_net" not in zoo.list_models()


def test_unknown_names_suggest_close_ones():
    with pytest.raises(KeyError, match="resnet18"):
        zoo.get_model("resnet81")


@pytest.mark.parametrize("name", MODELS)
def test_model_card(name):
    card = zoo.model_card(name)
    assert card["name"] == name and card["task"] == "classification"
    assert card["num_params"] > 0 and card["preprocessing"]["channels"] == "RGB"
    if card["dataset"] != "ImageNet-1K":   # shapesnet: the generated shapes data
        assert card["input_size"] == (3, 32, 32) and card["num_classes"] == 10
        return
    assert card["input_size"] == (3, 224, 224) and card["num_classes"] == 1000
    pre = card["preprocessing"]
    assert pre["crop"] == 224 and pre["resize"] in (232, 256)
    assert pre["mean"] == [0.485, 0.456, 0.406] and pre["std"] == [0.229, 0.224, 0.225]
    if name in TORCHVISION_ARCHS:
        assert 50 < card["metrics"]["torchvision"]["top1"] < 90
        megengine = [v for k, v in card["metrics"].items() if k.startswith("megengine")]
        assert megengine and all(50 < m["top1"] < 90 for m in megengine)
    for numbers in card["int8_metrics"].values():
        assert 50 < numbers["top1"] < 90 and abs(numbers["top1"] - numbers["float_top1"]) < 3
    card["metrics"]["changed"] = 1      # a copy: the registry's card is unchanged
    assert "changed" not in zoo.model_card(name)["metrics"]


def test_published_numbers_are_the_manifests():
    assert zoo.model_card("resnet50")["metrics"]["torchvision"] == {"top1": 76.130,
                                                                    "top5": 92.862}
    assert zoo.model_card("resnet50")["metrics"]["torchvision_v2"]["top1"] == 80.858
    assert zoo.model_card("resnet18")["metrics"]["megengine"]["top1"] == 70.312
    assert zoo.model_card("shufflenet_v2_x2_0")["preprocessing"]["resize"] == 232
    card = zoo.model_card("shufflenet_v1_x1_5_g3")
    assert card["int8_metrics"]["megengine_qat"] == {"top1": 70.806, "float_top1": 71.948}
    assert zoo.model_card("resnet18")["int8_metrics"]["torchvision_fbgemm"] == {
        "top1": 69.494, "top5": 88.882, "float_top1": 69.758}
    # the configurable builder shows its default build's numbers
    assert zoo.model_card("shufflenet_v1")["metrics"]["mmpretrain"]["top1"] == 68.13
    for name in zoo.list_models(task="classification"):
        card = zoo.model_card(name)
        for source, numbers in card["metrics"].items():
            arch = card.get("weights_arch", name)
            entry = weights.get_entry(f"{arch}.{card['dataset'].split('-')[0].lower()}"
                                      f"_{source}")
            assert entry.metrics == numbers, (name, source)


def test_no_model_file_spells_out_a_published_number():
    """The cards take them from the weights manifest; a model file names none."""
    folder = os.path.dirname(zoo.classification.__file__)
    numbers = {float(v) for e in weights.list_entries() for v in e.metrics.values()}
    for name in os.listdir(folder):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                found = {float(x) for x in re.findall(r"\b\d\d\.\d{1,3}\b", handle.read())}
            found &= numbers
            assert not found, (name, found)
