"""The file fuzz test's formats and its trial runner (run as a script by test_fuzz_files.py).

FORMATS: per format, how to write one valid small file, how to load a file the way a user
does, which errors are the project's own answer to a bad file, and the mutations to try.

    python tests/fuzz_worker.py FORMAT SEED BASE_FILE WORK_DIR INDEX...

prints `start I` before trial I and one JSON line after it: {"i", "mutator", "outcome"
("loaded" or "refused"), "problem" (None, or what went wrong), "seconds"}. A crash or a hang
shows as a `start` line without its result; the caller kills a hung worker and goes on.
"""
import json
import os
import random
import signal
import sys
import time
import warnings
from collections import OrderedDict, namedtuple
from functools import partial
from types import SimpleNamespace

import numpy as np

from tianyuan.datasets.base import CorruptImageError
from tianyuan.io import SerializationError, UnpicklingError
from tianyuan.weights import TorchFormatError

import fuzz_mutations as M

HERE = os.path.dirname(os.path.abspath(__file__))
for folder in (os.path.dirname(HERE), HERE, os.path.join(HERE, "weights"),
               os.path.join(HERE, "datasets")):   # the repository (tests.*), the test helpers
    if folder not in sys.path:
        sys.path.insert(0, folder)


# ---------------------------------------------------------------- valid files

def _tianyuan_file(folder):
    import tianyuan as ty
    path = os.path.join(folder, "w.safetensors")
    ty.save({"model": {"conv.weight": np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2),
                       "bn.num_batches_tracked": np.array(3)},
             "optimizer": {"state": {0: {"step": 2}}, "param_groups": [{"lr": 0.1,
                                                                        "betas": (0.9, 0.99)}]},
             "epoch": 3, "scale": np.float32(0.5), "flags": np.array([True, False])}, path)
    return path


def _graph_file(folder, int8):
    import tianyuan as ty
    from tianyuan import jit

    from tests.framework.test_jit import batch, int8_tiny
    from tests.quantization.qnets import TinyNet
    if int8:
        model = int8_tiny()
    else:
        ty.manual_seed(0)
        model = TinyNet()
    path = os.path.join(folder, "int8.graph" if int8 else "float.graph")
    jit.trace(model.eval(), batch(0)).save(path)
    return path


def _pth_file(folder, legacy):
    from pth_writer import Storage, Tensor, contiguous, write_legacy, write_zip
    shared = Storage("1", np.arange(12, dtype=np.float32))
    state = OrderedDict([("conv.weight", contiguous("0", np.ones((2, 1, 2, 2), np.float32))),
                         ("fc.weight", Tensor(shared, 0, (3, 4), (4, 1))),
                         ("fc.weight_t", Tensor(shared, 0, (4, 3), (1, 4))),
                         ("bn.num_batches_tracked", contiguous("2", np.array(5)))])
    path = os.path.join(folder, "legacy.pth" if legacy else "zip.pth")
    (write_legacy if legacy else write_zip)(path, state)
    return path


def _megengine_file(folder):
    import pickle
    qdtype = np.dtype("int8", metadata={"mgb_dtype": {"name": "QuantizedS8", "scale": 0.125}})
    state = {"epoch": 2, "state_dict": OrderedDict([
        ("conv.weight", np.arange(8, dtype=np.float32).reshape(2, 4)),
        ("q.weight", np.array([-2, 0, 3], dtype=qdtype))])}
    path = os.path.join(folder, "m.pkl")
    with open(path, "wb") as handle:
        pickle.dump(state, handle, protocol=2)   # bytes as _codecs.encode(str, "latin1")
    return path


def _coco_file(folder):
    from ds_fakes import ann, coco_json, write_image, write_json
    root = os.path.join(folder, "images")
    images = []
    for image_id, (h, w) in {1: (12, 16), 2: (10, 10)}.items():
        write_image(os.path.join(root, f"{image_id}.jpg"), h, w)
        images.append({"id": image_id, "file_name": f"{image_id}.jpg", "height": h, "width": w})
    names = ["nose", "left_eye", "right_eye"]
    categories = [{"id": 1, "name": "person", "keypoints": names, "skeleton": [[1, 2]]},
                  {"id": 3, "name": "car"}]
    annotations = [ann(1, 1, 1, [1, 2, 8, 6], keypoints=[2, 3, 2, 4, 4, 1, 0, 0, 0]),
                   ann(2, 1, 3, [0, 0, 5, 5]), ann(3, 2, 1, [2, 2, 4, 4], iscrowd=1)]
    path = os.path.join(folder, "annotations", "person_keypoints.json")
    write_json(path, coco_json(images, annotations, categories))
    return path


def _image_file(folder, ext):
    import cv2
    path = os.path.join(folder, f"image.{ext}")
    image = np.random.default_rng(0).integers(0, 256, (24, 20, 3), dtype=np.uint8)
    assert cv2.imwrite(path, image)
    return path


# ---------------------------------------------------------------- loading as a user does

def _load_tianyuan(path):
    import tianyuan as ty
    return ty.load(path)


def _load_graph(path):
    import tianyuan as ty

    from tests.framework.test_jit import batch
    graph = ty.runtime.load(path)
    return graph(batch(1))


def _load_coco(path):
    from tianyuan.datasets import COCO
    root = os.path.join(os.path.dirname(os.path.dirname(path)), "images")
    for task in ("detection", "keypoints"):
        dataset = COCO(root, path, task=task)
        items = [dataset[i] for i in range(len(dataset))]
    return items


def _load_image(path):
    from tianyuan.datasets.base import decode_image
    return decode_image(path, "cv2"), decode_image(path, "pil")


def _load_selftest(path):
    """The runner's own check (test_fuzz_files): trial 3 kills its worker, trial 5 hangs."""
    index = int(os.path.basename(path)[len("trial"):].split(".")[0])
    if index == 3:
        os.kill(os.getpid(), signal.SIGSEGV)
    if index == 5:
        time.sleep(3600)
    raise ValueError(f"{path}: refused")


def _load_pth(path):
    from tianyuan.weights import load_pth
    return load_pth(path)


def _load_megengine(path):
    from tianyuan.weights import load_megengine
    return load_megengine(path)


# The project's own errors for a bad file (a plain ValueError where the message names the
# file: the COCO checks and the MegEngine reader raise one).
OURS = SimpleNamespace(tianyuan=(SerializationError,), torch=(TorchFormatError, UnpicklingError),
                       pickle=(UnpicklingError, ValueError), coco=(ValueError, CorruptImageError),
                       image=(CorruptImageError,))
Format = namedtuple("Format", "build load errors mutators suffix")
TIANYUAN_MUTATORS = M.BYTE_MUTATORS + [M.safetensors_header, M.header_length,
                                       M.tianyuan_structure, M.tianyuan_structure,
                                       M.tianyuan_arrays]
FORMATS = {
    "safetensors": Format(_tianyuan_file, _load_tianyuan, OURS.tianyuan, TIANYUAN_MUTATORS,
                          ".safetensors"),
    "graph_int8": Format(partial(_graph_file, int8=True), _load_graph, OURS.tianyuan,
                         TIANYUAN_MUTATORS, ".graph"),
    "graph_float": Format(partial(_graph_file, int8=False), _load_graph, OURS.tianyuan,
                          TIANYUAN_MUTATORS, ".graph"),
    # the float graph (its ReLUs and adds run in place) with its memory plan edited (issue 56)
    "graph_plan": Format(partial(_graph_file, int8=False), _load_graph, OURS.tianyuan,
                         [M.graph_memory_plan] * 4 + [M.tianyuan_structure], ".graph"),
    "pth_zip": Format(partial(_pth_file, legacy=False), _load_pth, OURS.torch,
                      M.BYTE_MUTATORS + [M.zip_member] * 6, ".pth"),
    "pth_legacy": Format(partial(_pth_file, legacy=True), _load_pth, OURS.torch,
                         M.PICKLE_MUTATORS, ".pth"),
    "megengine": Format(_megengine_file, _load_megengine, OURS.pickle, M.PICKLE_MUTATORS,
                        ".pkl"),
    "coco": Format(_coco_file, _load_coco, OURS.coco, M.BYTE_MUTATORS + [M.json_text] * 6,
                   ".json"),
    "png": Format(partial(_image_file, ext="png"), _load_image, OURS.image,
                  M.BYTE_MUTATORS + [M.png_chunks] * 4, ".png"),
    "jpeg": Format(partial(_image_file, ext="jpg"), _load_image, OURS.image,
                   M.BYTE_MUTATORS + [M.jpeg_size], ".jpg"),
    "selftest": Format(partial(_image_file, ext="png"), _load_selftest, (ValueError,),
                       [M.flip_bits], ".bin"),
}
FILE_FORMATS = [name for name in FORMATS if name != "selftest"]


def build(name, folder):
    """Write the valid file of format `name` under `folder`; its path."""
    os.makedirs(folder, exist_ok=True)
    return FORMATS[name].build(folder)


# ---------------------------------------------------------------- trials

def mutate(name, base, seed, index):
    """Trial `index`'s bytes: the same for the same seed, on any machine."""
    rng = random.Random(f"{seed}/{name}/{index}")
    mutator = rng.choice(FORMATS[name].mutators)
    try:
        return mutator.__name__, mutator(base, rng)
    except Exception:   # the file is past what this mutator can parse: flip bits instead
        return "flip_bits", M.flip_bits(base, rng)


def judge(error, names, allowed):
    """None if `error` is the project's answer to a bad file (an allowed type or one of the
    project's own subclasses of it, not e.g. json's or Unicode's; one of `names`, the file or
    the images folder of a COCO json, in the message; one line); else what is wrong."""
    kind, text = type(error), str(error)
    if kind not in allowed and not (isinstance(error, allowed) and
                                    kind.__module__.startswith("tianyuan.")):
        return f"{kind.__module__}.{kind.__name__}: {text[:300]}"
    if not any(name in text for name in names):
        return f"{kind.__name__} does not name the file: {text[:300]}"
    if "\n" in text.strip():
        return f"{kind.__name__} is several lines: {text[:300]}"
    return None


def run_trial(name, base, seed, index, work):
    form = FORMATS[name]
    mutator, data = mutate(name, base, seed, index)
    folder = os.path.join(work, "annotations") if name == "coco" else work
    path = os.path.join(folder, f"trial{index}{form.suffix}")
    with open(path, "wb") as handle:
        handle.write(data)
    names = (path, os.path.join(work, "images")) if name == "coco" else (path,)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            form.load(path)
        outcome, problem = "loaded", None
    except Exception as error:   # noqa: BLE001 -- judging every exception is the point
        outcome, problem = "refused", judge(error, names, form.errors)
    finally:
        os.unlink(path)
    return {"i": index, "mutator": mutator, "outcome": outcome, "problem": problem,
            "seconds": round(time.perf_counter() - start, 3)}


MEMORY_LIMIT = 4 << 30   # bytes: a file that makes a loader allocate more fails its trial
MAX_PIXELS = 1 << 22     # images claiming more are refused as over the limit, sooner


def main(argv):
    import resource

    from tianyuan.datasets import set_max_image_pixels
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    set_max_image_pixels(MAX_PIXELS)
    name, seed, base_path, work = argv[:4]
    with open(base_path, "rb") as handle:
        base = handle.read()
    if name == "coco":   # the images beside the json, found from the trial's path
        os.makedirs(os.path.join(work, "annotations"), exist_ok=True)
        images = os.path.join(work, "images")
        if not os.path.exists(images):
            os.symlink(os.path.join(os.path.dirname(os.path.dirname(base_path)), "images"),
                       images)
    for index in map(int, argv[4:]):
        print(f"start {index}", flush=True)
        print(json.dumps(run_trial(name, base, seed, index, work)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
