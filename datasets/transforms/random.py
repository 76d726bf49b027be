"""The random generator transforms draw from, set per sample by the DataLoader.

The DataLoader seeds a fresh generator for every sample from (base seed, epoch, batch,
position), so augmentation is the same whether a sample is loaded in the main process
or in any worker. Outside a DataLoader the module-level default generator is used.

>>> with sample_rng(np.random.SeedSequence([0, 1])):   # doctest: +SKIP
...     out = transform(item)
"""
import contextlib

import numpy as np

_default = np.random.default_rng()
_current = None


def get_rng():
    """The generator a transform should draw from now."""
    return _current if _current is not None else _default


def seed(value):
    """Reseed the default generator (outside a DataLoader)."""
    global _default
    _default = np.random.default_rng(value)


@contextlib.contextmanager
def sample_rng(seed_sequence):
    """Within the block, `get_rng()` is a generator seeded from `seed_sequence`."""
    global _current
    previous = _current
    _current = np.random.default_rng(seed_sequence)
    try:
        yield _current
    finally:
        _current = previous
