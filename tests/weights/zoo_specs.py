"""The zoo's built models as the weights tests' specs: `weights` keeps no architecture
tables for them (weights/specs.py), so a file is checked against the model it loads into."""
import functools

import tianyuan as ty
from tianyuan import weights, zoo


@functools.lru_cache(maxsize=None)
def spec(arch, num_classes=1000):
    """`spec_of` the zoo's default build of `arch` (the framework's random stream kept)."""
    state = ty.random.get_rng_state()
    try:
        return weights.spec_of(zoo.get_model(arch, num_classes=num_classes))
    finally:
        ty.random.set_rng_state(state)


def random_state(arch, num_classes=1000, seed=0):
    """A synthetic state dict in `arch`'s names and shapes (torchvision's)."""
    return weights.random_state_dict(spec(arch, num_classes), seed)
