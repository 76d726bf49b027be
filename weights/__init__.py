"""Weight manifest, download cache, checksums and converters from other formats.

>>> from tianyuan.weights import load_weights
>>> state = load_weights("resnet50.imagenet_torchvision")   # {name: np.ndarray}, our names

Nothing here imports torch, megengine or `tianyuan.zoo`; see weights/README.md.
"""
from .api import (FORMATS, cached_entries, detect_format, download, entry_path, import_file,
                  is_cached, load_weights, read_file, save_weights, verify)
from .download import (ChecksumError, DownloadError, OfflineError, cache_path, fetch,
                       is_offline, sha256_file, tianyuan_home)
from .manifest import (WeightEntry, default_entry, get_entry, list_entries, register,
                       unregister, with_mirrors)
from .megengine_detection import DetectionArchitectureError, convert_megengine_detection
from .megengine_pkl import load_megengine
from .name_maps import NameMapError, check_against_spec, convert_state_dict
from .specs import known_archs, random_state_dict, spec_of, state_dict_spec
from .qtensor import QTensor, flatten_qtensors
from .torch_pth import TorchFormatError, load_pth
