"""Safe I/O: safetensors + JSON for our files, a restricted unpickler for foreign ones."""
from .unpickle import (BYTES_GLOBALS, NUMPY_GLOBALS, UnpicklingError, UnpicklingRefused,
                       safe_unpickle)
from .serialization import SerializationError, load, save
