"""What load_state_dict checks before it copies anything: the error naming every missing,
unexpected and mis-shaped key, and the dtypes a value may be cast from."""
import numpy as np

from ..tensor import Tensor


def array_of(value):
    return value.data if isinstance(value, Tensor) else value


def load_error(owner, missing, unexpected, mismatched):
    """The message of a state dict that does not fit module class `owner`."""
    lines = [f"load_state_dict: error(s) loading state_dict for {owner}:"]
    if missing:
        lines.append(f"  missing key(s) ({len(missing)}): " + ", ".join(missing))
    if unexpected:
        lines.append(f"  unexpected key(s) ({len(unexpected)}): " + ", ".join(unexpected))
    for key, given, wanted in mismatched:
        lines.append(f"  size mismatch for {key}: checkpoint shape {tuple(given)}, "
                     f"model shape {tuple(wanted)}")
    return "\n".join(lines)


def dtype_fits(given, wanted):
    """Whether an array of dtype `given` may be cast into a `wanted` one: float to float
    (float16, bfloat16 files into float32 parameters), integer to integer, bool to bool;
    never integer or bool into float, float into integer, complex or objects into any."""
    kinds = {"f": "f", "i": "iu", "u": "iu", "b": "b"}
    return given.kind in kinds.get(wanted.kind, "")


def check_dtypes(state_dict, expected):
    """Refuse a value whose dtype cannot be its parameter's or buffer's (a file edited from
    F32 to I32 casts integers into float weights), naming the key. `expected`: {key: the
    tensor, or None for state not shaped yet, which takes any float or integer array}."""
    for key, tensor in expected.items():
        if key not in state_dict:
            continue
        given = np.asarray(array_of(state_dict[key])).dtype
        wanted = np.dtype(tensor.dtype) if tensor is not None else None
        if given.kind not in "fiub" or (wanted is not None and not dtype_fits(given, wanted)):
            raise RuntimeError(f"load_state_dict: {key} is {given} in the state dict, but the "
                               f"model's is {wanted or 'float or integer'}: refusing to "
                               "cast (a wrong or edited file?)")
