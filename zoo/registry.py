"""One registry of model builders, keyed by paper-variant name, with a model card per name.

A builder is any callable returning a Module; it is registered once, loudly refusing a
duplicate name. A model card is a small dict the evaluation and README read: task, input
size, preprocessing, the published metrics, the parameter count. The published numbers
and the default weights' preprocessing are the weights manifest's, read at lookup
(`tianyuan.weights`, one source): `metrics` by source (`"torchvision"`, `"megengine"`,
`"torchvision_v2"` ..., the entry's name after its dataset), `int8_metrics` likewise for the
int8 entries, each with its float parent's top-1 as `float_top1`.

>>> from tianyuan.zoo import get_model, list_models, model_card
>>> model = get_model("resnet18", num_classes=10)
>>> "shufflenet_v2_x1_0" in list_models("shufflenet*")
True
>>> model_card("resnet50")["metrics"]["torchvision"]["top1"]
76.13
"""
import copy
import difflib
import fnmatch
from collections import OrderedDict

from tianyuan import random as ty_random

from ..weights.preprocessing import TORCHVISION_V1

_BUILDERS = OrderedDict()   # name -> builder
_CARDS = {}                 # name -> card dict (num_params filled on first lookup)

# torchvision's V1 eval preset (REFERENCE.md 1d): pixels / 255, then (x - mean) / std
IMAGENET_PREPROCESSING = TORCHVISION_V1


def classification_card(input_size=(3, 224, 224), **extra):
    """A classification model card. Its published numbers come from the weights manifest's
    entries for the model (or for `weights_arch=`, the variant a configurable builder
    builds by default); `preprocessing` here is for models without a default entry."""
    card = {"task": "classification", "dataset": "ImageNet-1K", "num_classes": 1000,
            "input_size": tuple(input_size), "preprocessing": dict(IMAGENET_PREPROCESSING)}
    card.update(extra)
    return card


def register_model(name, builder=None, card=None):
    """Register `builder` under `name`; loud on duplicates. Returns the builder.

    Decorator: `@register_model("mynet")`; call: `resnet18 = register_model("resnet18",
    partial(_resnet, ...), card)`.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_model: name must be a non-empty string, got {name!r}")

    def add(fn):
        if name in _BUILDERS:
            raise ValueError(f"register_model: a model named {name!r} is already registered "
                             f"({_BUILDERS[name]!r})")
        if not callable(fn):
            raise TypeError(f"register_model({name!r}): builder must be callable, got "
                            f"{type(fn).__name__}")
        _BUILDERS[name] = fn
        _CARDS[name] = dict(card or {}, name=name)
        return fn

    return add if builder is None else add(builder)


def unregister_model(name):
    """Remove a registration (for tests and user experiments)."""
    _builder(name)
    del _BUILDERS[name]
    del _CARDS[name]


def _builder(name):
    if name not in _BUILDERS:
        close = difflib.get_close_matches(str(name), list(_BUILDERS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"get_model: unknown model {name!r}{hint} (known: {list_models()})")
    return _BUILDERS[name]


def get_builder(name):
    return _builder(name)


def get_model(name, **kwargs):
    """Build the registered model `name`: `get_model("mobilenet_v2", width_mult=0.5)`."""
    return _builder(name)(**kwargs)


def list_models(pattern=None, task=None):
    """Sorted registered names, optionally filtered by a glob (`"resnet*"`) and by the card's
    task (`task="classification"`: the classifiers the generic tests sweep)."""
    names = sorted(_BUILDERS)
    if task is not None:
        names = [n for n in names if _CARDS[n].get("task") == task]
    return [n for n in names if fnmatch.fnmatch(n, pattern)] if pattern else names


def model_card(name):
    """A copy of `name`'s card with the manifest's numbers (`published`); `num_params` is
    counted from the default build, once."""
    _builder(name)
    card = _CARDS[name]
    if "num_params" not in card:
        card["num_params"] = _count_params(name)
    card = copy.deepcopy(card)
    found = published(card.get("weights_arch", name))
    card["metrics"] = {**card.get("metrics", {}), **found["metrics"]}
    card["int8_metrics"] = found["int8_metrics"]
    if found["preprocessing"] is not None:
        card["preprocessing"] = found["preprocessing"]
    return card


def published(arch):
    """{"metrics": {source: numbers}, "int8_metrics": {source: numbers + float_top1},
    "preprocessing": the default entry's or None} from the weights manifest's `arch` entries;
    a source is the entry's name after its dataset (`resnet50.imagenet_torchvision_v2` ->
    `torchvision_v2`)."""
    from ..weights import default_entry, get_entry, list_entries
    metrics, int8 = {}, {}
    for entry in list_entries(arch):
        source = entry.name.split(".", 1)[1].split("_", 1)[-1]
        if entry.float_parent is None:
            metrics[source] = dict(entry.metrics)
        else:
            parent = get_entry(entry.float_parent).metrics.get("top1")
            int8[source] = {**entry.metrics, "float_top1": parent}
    try:
        pre = copy.deepcopy(default_entry(arch).preprocessing)
    except KeyError:   # no convertible weights: the card's own
        pre = None
    return {"metrics": metrics, "int8_metrics": int8, "preprocessing": pre}


def _count_params(name):
    return int(sum(p.size for p in _quiet_build(name).parameters()))


def _quiet_build(name, **kwargs):
    """get_model, leaving the framework's random stream as it was (a card or a spec lookup
    must not change the weights a seeded run initialises next)."""
    state = ty_random.get_rng_state()
    try:
        return get_model(name, **kwargs)
    finally:
        ty_random.set_rng_state(state)


def model_spec(name, num_classes=1000):
    """{state-dict name: (shape, dtype name)} of classifier `name` built with `num_classes`
    (what `tianyuan weights import` checks a file against); None for other models, whose
    weights carry their own checks (gan_maps, inception_maps)."""
    from ..weights import spec_of
    if name not in _BUILDERS or _CARDS[name].get("task") != "classification":
        return None
    return spec_of(_quiet_build(name, num_classes=num_classes))
