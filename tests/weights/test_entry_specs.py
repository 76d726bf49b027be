"""Every manifest entry against the zoo model it is for: a file in the entry's own layout
(synthetic, the source's names and shapes) converts to exactly the built model's names and
shapes. The spec is the model's (weights keeps no second copy of the architectures)."""
from collections import OrderedDict

import pytest

import megvii_reference as ref
from tianyuan import weights, zoo
from zoo_specs import random_state, spec

CLASSIFIERS = set(zoo.list_models(task="classification"))
ENTRIES = [e.name for e in weights.list_entries() if e.arch in CLASSIFIERS]


def _megengine_layout(state):
    """MegEngine Models' ResNet arrays: BN arrays (1, C, 1, 1), no num_batches_tracked."""
    return OrderedDict((k, v.reshape(1, -1, 1, 1) if v.ndim == 1 and not k.startswith("fc.")
                        else v) for k, v in state.items()
                       if not k.endswith("num_batches_tracked"))


def _source_file(entry):
    """A state dict as the entry's file holds it."""
    if entry.converter == "torchvision":
        state = random_state(entry.arch)
        if "legacy" in entry.name:   # the 2017 files predate num_batches_tracked
            state = OrderedDict((k, v) for k, v in state.items()
                                if not k.endswith("num_batches_tracked"))
        return state
    if entry.arch.startswith("shufflenet_v2"):    # Megvii's layout
        return ref.v2_state(entry.arch[len("shufflenet_v2_x"):].replace("_", ".") + "x",
                            num_classes=1000)
    return _megengine_layout(random_state(entry.arch))


def test_every_classifier_entry_is_checked():
    assert len(ENTRIES) > 30 and {weights.get_entry(n).arch for n in ENTRIES} >= {
        "resnet18", "resnet50", "resnet152", "mobilenet_v2", "shufflenet_v2_x0_5"}


@pytest.mark.parametrize("name", ENTRIES)
def test_entry_converts_to_the_built_models_names_and_shapes(name):
    entry = weights.get_entry(name)
    model_spec = spec(entry.arch)                       # builds: the arch is the zoo's
    head = [k for k in weights.specs.CLASSIFIER_KEYS if k in model_spec]
    assert model_spec[head[0]][0][0] == 1000            # an ImageNet head
    if entry.converter in (None, "quantized"):          # download only / int8 arrays
        assert entry.converter or entry.notes
        return
    out = weights.convert_state_dict(_source_file(entry), entry.arch, entry.converter,
                                     spec=model_spec)   # raises, naming every bad key
    assert list(out) == list(model_spec)
    assert weights.spec_of(out) == model_spec
