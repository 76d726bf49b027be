"""One registry of model builders, keyed by paper-variant name, with a model card per name.

A builder is any callable returning a Module; it is registered once, loudly refusing a
duplicate name. A model card is a small dict the evaluation and README read: task, input
size, preprocessing, the published metrics, the parameter count.

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

from ..weights.preprocessing import TORCHVISION_V1

_BUILDERS = OrderedDict()   # name -> builder
_CARDS = {}                 # name -> card dict (num_params filled on first lookup)

# torchvision's V1 eval preset (REFERENCE.md 1d): pixels / 255, then (x - mean) / std
IMAGENET_PREPROCESSING = TORCHVISION_V1


def classification_card(metrics=None, input_size=(3, 224, 224), **extra):
    """A classification model card; `metrics` maps a source to its published numbers,
    e.g. {"torchvision": {"top1": 69.758, "top5": 89.078}, "megengine": {"top1": 70.312}}."""
    card = {"task": "classification", "dataset": "ImageNet-1K", "num_classes": 1000,
            "input_size": tuple(input_size), "preprocessing": dict(IMAGENET_PREPROCESSING),
            "metrics": dict(metrics or {})}
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
    """A copy of `name`'s card; `num_params` is counted from the default build once."""
    _builder(name)
    card = _CARDS[name]
    if "num_params" not in card:
        card["num_params"] = _count_params(name)
    return copy.deepcopy(card)


def _count_params(name):
    # torchvision archs are counted from the weights spec (no model is built)
    from ..weights import known_archs, state_dict_spec
    if name in known_archs():
        spec = state_dict_spec(name)
        return int(sum(_numel(shape) for key, (shape, _) in spec.items()
                       if not key.endswith(("running_mean", "running_var",
                                            "num_batches_tracked"))))
    model = get_model(name)
    return int(sum(p.size for p in model.parameters()))


def _numel(shape):
    n = 1
    for dim in shape:
        n *= dim
    return n
