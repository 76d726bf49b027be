"""QConfig: which observer and fake quantizer watch weights and activations; the presets;
and the registries that let a user plug in their own by name.

A QConfig field is a factory (a class or `functools.partial`) or a registered name
(`"ema"`, `"lsq"`, ...). Every QAT module calls each factory once, so no instance is
shared between layers.

>>> from functools import partial
>>> qc = QConfig(weight_observer="weight_minmax", act_observer=partial(
...     MovingAverageMinMaxObserver, dtype="int8", symmetric=True),
...     weight_fake_quant="ste", act_fake_quant="ste")   # int8 symmetric activations
"""
from collections import namedtuple
from functools import partial

from .fake_quant import FakeQuantize, LSQFakeQuantize
from .histogram import HistogramObserver
from .observer import MinMaxObserver, MovingAverageMinMaxObserver, make_weight_observer

OBSERVERS = {}
FAKE_QUANTIZERS = {}
QCONFIGS = {}        # preset name ("ema_fakequant", "calibration", ...) -> QConfig


def _register(table, noun, name, factory, override):
    if not callable(factory):
        raise TypeError(f"register_{noun}: {name!r} must map to a class or factory, got "
                        f"{type(factory).__name__}")
    if name in table and not override:
        raise KeyError(f"register_{noun}: {name!r} is already registered "
                       f"({table[name]}); pass override=True to replace it")
    table[name] = factory
    return factory


def register_observer(name, factory=None, override=False):
    """Register an Observer class/factory under `name`; usable as a decorator."""
    if factory is None:
        return lambda f: _register(OBSERVERS, "observer", name, f, override)
    return _register(OBSERVERS, "observer", name, factory, override)


def register_fake_quantizer(name, factory=None, override=False):
    """Register a fake-quantizer class/factory under `name`; usable as a decorator."""
    if factory is None:
        return lambda f: _register(FAKE_QUANTIZERS, "fake_quantizer", name, f, override)
    return _register(FAKE_QUANTIZERS, "fake_quantizer", name, factory, override)


def _resolve(table, noun, entry):
    if isinstance(entry, str):
        if entry not in table:
            raise KeyError(f"QConfig: unknown {noun} {entry!r}; registered: {sorted(table)}")
        return table[entry]
    if not callable(entry):
        raise TypeError(f"QConfig: {noun} must be a name, a class or a partial, got an "
                        f"instance of {type(entry).__name__} (instances would be shared)")
    return entry


class QConfig(namedtuple("QConfig", ["weight_observer", "act_observer", "weight_fake_quant",
                                     "act_fake_quant"])):
    """Four factories (or registered names); `make_*` build fresh instances."""

    def make_weight_observer(self):
        return _resolve(OBSERVERS, "observer", self.weight_observer)()

    def make_act_observer(self):
        return _resolve(OBSERVERS, "observer", self.act_observer)()

    def make_weight_fake_quant(self):
        return _resolve(FAKE_QUANTIZERS, "fake quantizer", self.weight_fake_quant)()

    def make_act_fake_quant(self):
        return _resolve(FAKE_QUANTIZERS, "fake quantizer", self.act_fake_quant)()


register_observer("min_max", MinMaxObserver)
register_observer("ema", MovingAverageMinMaxObserver)
register_observer("histogram", HistogramObserver)
register_observer("weight_minmax", make_weight_observer)
register_fake_quantizer("ste", FakeQuantize)
register_fake_quantizer("lsq", LSQFakeQuantize)

# weights: int8 symmetric per output channel; activations: uint8 asymmetric per tensor
ema_fakequant_qconfig = QConfig(make_weight_observer, MovingAverageMinMaxObserver,
                                FakeQuantize, FakeQuantize)
min_max_fakequant_qconfig = QConfig(make_weight_observer, MinMaxObserver,
                                    FakeQuantize, FakeQuantize)
calibration_qconfig = QConfig(make_weight_observer, HistogramObserver,
                              FakeQuantize, FakeQuantize)
lsq_qconfig = QConfig(make_weight_observer, MovingAverageMinMaxObserver,
                      LSQFakeQuantize, LSQFakeQuantize)
# weights on the 7-bit grid [-63, 63] (ONNX Runtime's reduce_range): on AVX2 CPUs without
# VNNI every convolution but the depthwise ones then runs the faster exact tile
# (packing.PackedWeight.narrow)
reduce_range_qconfig = QConfig(partial(make_weight_observer, reduce_range=True),
                               MovingAverageMinMaxObserver, FakeQuantize, FakeQuantize)
calibration_reduce_range_qconfig = QConfig(partial(make_weight_observer, reduce_range=True),
                                           HistogramObserver, FakeQuantize, FakeQuantize)
int8_symmetric_qconfig = QConfig(make_weight_observer,
                                 partial(MovingAverageMinMaxObserver, dtype="int8",
                                         symmetric=True), FakeQuantize, FakeQuantize)


def register_qconfig(name, qconfig, override=False):
    """Register a QConfig preset under `name`, for `get_qconfig` and the recipes'
    `quant.qconfig=NAME`."""
    if not isinstance(qconfig, QConfig):
        raise TypeError(f"register_qconfig: {name!r} must be a QConfig, got "
                        f"{type(qconfig).__name__}")
    if name in QCONFIGS and not override:
        raise KeyError(f"register_qconfig: {name!r} is already registered; pass "
                       "override=True to replace it")
    QCONFIGS[name] = qconfig
    return qconfig


def get_qconfig(name):
    """The QConfig preset `name` (a QConfig passes through)."""
    if isinstance(name, QConfig):
        return name
    if name not in QCONFIGS:
        raise ValueError(f"unknown qconfig {name!r}; presets: {sorted(QCONFIGS)}")
    return QCONFIGS[name]


for _name, _preset in [("ema_fakequant", ema_fakequant_qconfig),
                       ("min_max_fakequant", min_max_fakequant_qconfig),
                       ("calibration", calibration_qconfig), ("lsq", lsq_qconfig),
                       ("reduce_range", reduce_range_qconfig),
                       ("calibration_reduce_range", calibration_reduce_range_qconfig),
                       ("int8_symmetric", int8_symmetric_qconfig)]:
    register_qconfig(_name, _preset)
