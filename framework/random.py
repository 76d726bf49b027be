"""The framework's seeded random stream (initialisation, dropout, randn/rand)."""
import numpy as np

_generator = {"rng": np.random.default_rng(0)}


def manual_seed(seed):
    """Reseed every random draw the framework makes (weights init, dropout, randn)."""
    _generator["rng"] = np.random.default_rng(int(seed))


def rng():
    return _generator["rng"]


def get_rng_state():
    return _generator["rng"].bit_generator.state


def set_rng_state(state):
    generator = np.random.default_rng()
    generator.bit_generator.state = state
    _generator["rng"] = generator
