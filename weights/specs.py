"""State-dict specs: {name: (shape, dtype name)}, what a converted file is checked against.

A spec comes from where the architecture is defined. The zoo's classifiers are built from
their own tables (zoo/classification), so their spec is the built model's: `spec_of(model)`,
which the zoo hands to the weights API (`load_weights(..., spec=spec_of(model))`), and the
tests compare every manifest entry with it. Models the zoo builds from tables kept here
(Inception-v3, inception_maps.py) have `state_dict_spec(arch)` without a model; `weights`
never imports `zoo`.

>>> from tianyuan import nn
>>> spec_of(nn.Linear(3, 2))
OrderedDict([('weight', ((2, 3), 'float32')), ('bias', ((2,), 'float32'))])
"""
from collections import OrderedDict

import numpy as np

from .inception_maps import INCEPTIONS, inception_spec

# classifier heads whose first dimension is the number of classes (torchvision's names)
CLASSIFIER_KEYS = ("fc.weight", "classifier.1.weight")


def spec_of(model_or_state):
    """The spec of a Module (its state dict) or of a {name: array} dict."""
    state = model_or_state
    if hasattr(model_or_state, "state_dict"):
        state = model_or_state.state_dict()
    return OrderedDict((name, (tuple(np.shape(value)), np.asarray(value).dtype.name))
                       for name, value in state.items())


def known_archs():
    """Archs whose spec is kept here (`state_dict_spec`); the zoo's classifiers are not
    among them: their spec is the built model's."""
    return sorted(INCEPTIONS)


def state_dict_spec(arch, num_classes=1000):
    """OrderedDict {name: (shape, dtype name)} of an arch built from tables kept here."""
    if arch in INCEPTIONS:   # inception_maps.py; fid_inception_v3 has 1008 classes
        return inception_spec(arch, num_classes)
    raise KeyError(f"state_dict_spec: no spec kept for {arch!r} (known: {known_archs()}); "
                   "a zoo model's spec is its built model's: spec_of(zoo.get_model(arch))")


def random_state_dict(spec, seed=0):
    """A synthetic state dict with `spec`'s names, shapes and dtypes (for tests and demos);
    running variances are positive."""
    rng = np.random.default_rng(seed)
    out = OrderedDict()
    for name, (shape, dtype) in spec.items():
        if np.dtype(dtype).kind in "iu":
            out[name] = np.asarray(rng.integers(0, 1000, shape), dtype)
        elif name.endswith("running_var"):
            out[name] = rng.uniform(0.5, 1.5, shape).astype(dtype)
        else:
            out[name] = (rng.standard_normal(shape) * 0.1).astype(dtype)
    return out
