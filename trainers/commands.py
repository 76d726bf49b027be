"""`tianyuan eval` and `tianyuan bench`: hydra-composed (trainers/conf/eval.yaml, bench.yaml).

    tianyuan eval model=resnet18 weights=runs/r18/best.safetensors data.root=/data/imagenet
    tianyuan eval model=resnet18 weights=resnet18.imagenet_torchvision data.root=...
    tianyuan eval model=shapesnet data=shapes weights=runs/smoke/best.safetensors
    tianyuan bench model=resnet50 precision=fp32 batch=16 repeats=10
    tianyuan bench model=mobilenet_v2 precision=int8 trace=true   # as deployed (jit.trace)

Both print a table and write JSON (`out=`).
"""
import copy
import inspect
import os
import sys

import numpy as np
from hydra.utils import get_object, instantiate
from omegaconf import OmegaConf, open_dict

import tianyuan as ty
from tianyuan import distributed as dist
from tianyuan.evaluation import inference
from tianyuan.evaluation.benchmark import benchmark, example_input
from tianyuan.evaluation.classification import card_preprocessing
from tianyuan.evaluation.report import format_table, write_json

from .checkpoint import model_weights
from .config import CONF_DIR, compose, to_dict, usage, use_threads


def _card(model_cfg):
    """The zoo model card of a `tianyuan.zoo.get_model` config, else None."""
    if model_cfg.get("_target_") != "tianyuan.zoo.get_model":
        return None
    from tianyuan.zoo import model_card
    try:
        return model_card(model_cfg.name)
    except KeyError:
        return None


def build_model(model_cfg, weights=None, num_classes=None, command="eval"):
    """The configured model with `weights`: a file (weights or checkpoint) loaded strictly,
    or any other string handed to the builder as `weights=` (a manifest name). A classifier
    file with another class count than the config's builds the model with the file's (said
    in one line); a file of another architecture is refused in one line that says so."""
    kwargs = {} if num_classes is None else {"num_classes": int(num_classes)}
    if weights and not os.path.exists(weights):
        return instantiate(model_cfg, weights=weights, **kwargs)
    model = instantiate(model_cfg, **kwargs)
    if not weights:
        return model
    state = model_weights(ty.load(weights))
    head = getattr(model, "classifier_name", None)
    shape = np.shape(state.get(f"{head}.weight")) if head else ()
    ours = model.state_dict()
    if (num_classes is None and len(shape) == 2 and shape[0] != model.num_classes and
            _same_body(state, ours, head)):
        print(f"{command}: {shape[0]} classes, from the weights ({head}.weight {shape}); "
              f"the model config said {model.num_classes}", flush=True)
        model = instantiate(model_cfg, num_classes=int(shape[0]))
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(_misfit(weights, model_cfg, model, state, error)) from None
    return model


def _same_body(state, ours, head):
    """Whether two state dicts differ at most in the classifier `head`'s shapes."""
    return set(state) == set(ours) and all(
        np.shape(state[k]) == np.shape(ours[k]) for k in ours if not k.startswith(head + "."))


def _misfit(weights, model_cfg, model, state, error):
    """One line for weights that do not load into the model: counts, the first shape that
    differs, both classifiers (which usually name the architecture)."""
    ours = model.state_dict()
    name = model_cfg.get("name", model_cfg.get("_target_"))
    missing = [k for k in ours if k not in state]
    unexpected = [k for k in state if k not in ours]
    differ = [k for k in ours if k in state and np.shape(state[k]) != np.shape(ours[k])]
    if not (missing or unexpected or differ):     # the shapes fit: a dtype the model refuses
        return f"{weights}: {str(error).replace('load_state_dict: ', '')}"
    parts = [f"{len(missing)} of the model's {len(ours)} tensors missing"] if missing else []
    parts += [f"{len(unexpected)} the model lacks"] if unexpected else []
    if differ:
        k = differ[0]
        parts.append(f"{len(differ)} of another shape ({k}: file {np.shape(state[k])}, "
                     f"model {np.shape(ours[k])})")
    text = f"weights {weights} do not fit {name}: {', '.join(parts)}"
    head = getattr(model, "classifier_name", None)
    theirs = np.shape(state.get(f"{head}.weight")) if head else ()
    if len(theirs) == 2:
        mine = np.shape(ours[f"{head}.weight"])
        text += (f"; the file's {head} is {theirs[1]}->{theirs[0]}, {name}'s "
                 f"{mine[1]}->{mine[0]}")
    return text + ": weights of another architecture? give the model= they were made for"


PRE_KEYS = ("resize", "image_size", "mean", "std")


def _data_preprocessing(data):
    if not all(key in data for key in PRE_KEYS):
        return None           # a data builder of the user's: its own preprocessing
    return {"resize": data.resize, "crop": data.image_size,
            "mean": tuple(float(m) for m in data.mean), "std": tuple(float(s) for s in data.std)}


def _data_set_by_user(data):
    """Whether the data config's resize/image_size/mean/std differ from its kind's defaults
    (trainers/conf/data/{kind}.yaml): set on the command line or by a recipe."""
    path = os.path.join(CONF_DIR, "data", f"{data.get('kind')}.yaml")
    if not os.path.exists(path):
        return True
    ours = OmegaConf.to_container(data, resolve=True)
    defaults = OmegaConf.to_container(OmegaConf.load(path))
    return any(ours.get(key) != defaults.get(key) for key in PRE_KEYS)


def _describe(pre):
    mean = ", ".join(f"{m:g}" for m in pre["mean"])
    std = ", ".join(f"{s:g}" for s in pre["std"])
    return f"resize {pre['resize']}, crop {pre['crop']}, mean ({mean}), std ({std})"


def choose_preprocessing(cfg, card, command="eval"):
    """(eval_transform kwargs, source) for eval and quantize. `preprocessing=auto`: the data
    config's where the user set any of data.resize/image_size/mean/std (or the data has no
    card to follow: cifar10, shapes, a model without a card), else the model card's. Where
    the two disagree, one line says which was taken and how to take the other."""
    data = cfg.data
    if cfg.preprocessing not in ("auto", "data", "card"):
        raise ValueError(f"{command}: preprocessing must be 'auto', 'data' or 'card', got "
                         f"{cfg.preprocessing!r}")
    own = _data_preprocessing(data)
    if card is None or own is None or data.get("kind") not in ("imagenet", "folder"):
        if cfg.preprocessing == "card":
            raise ValueError(f"{command}: preprocessing=card, but {data.get('kind', 'this')} "
                             "data takes its own preprocessing (no model card applies)")
        return own, "data config"
    theirs = card_preprocessing(card)
    if cfg.preprocessing == "data" or (cfg.preprocessing == "auto" and _data_set_by_user(data)):
        pre, source, other, switch = own, "data config", theirs, "card"
    else:
        pre, source, other, switch = theirs, "model card", own, "data"
    if _describe(pre) != _describe(other) and cfg.preprocessing == "auto":
        print(f"{command}: preprocessing from the {source} ({_describe(pre)}); the "
              f"{'data config' if switch == 'data' else 'model card'} says "
              f"{_describe(other)}: preprocessing={switch} takes that one", flush=True)
    return pre, source


def build_data(cfg, pre=None, splits=("val",), augment=None):
    """(train loader, val loader, meta) of cfg.data through instantiate, as `tianyuan train`
    builds them: `pre` (choose_preprocessing) replaces the config's resize/image_size/mean/
    std; `splits` and `augment` go to a builder that takes them (classification_data: the
    evaluation lists no training images; calibration takes them unaugmented)."""
    data = copy.deepcopy(cfg.data)
    if pre is not None:
        with open_dict(data):
            data.resize, data.image_size = pre["resize"], pre["crop"]
            data.mean, data.std = list(pre["mean"]), list(pre["std"])
    takes = inspect.signature(get_object(data._target_)).parameters
    extra = {"splits": list(splits)} if "splits" in takes else {}
    if augment is not None and "augment" in takes:
        extra["augment"] = augment
    return instantiate(data, seed=cfg.get("seed", 0), **extra)


def evaluate(cfg):
    """cfg.task's metrics of the configured model on the data's validation split; returns
    the result. Under `mpiexec -n N` each process scores its share of the split and
    process 0 reports."""
    rank, world = dist.rank(), dist.world_size()
    use_threads(cfg.num_threads)
    pre, source = choose_preprocessing(cfg, _card(cfg.model))
    _, loader, meta = build_data(cfg, pre)
    if loader is None:
        raise ValueError(f"eval: the data config ({cfg.data._target_}) gave no validation "
                         "loader")
    model = build_model(cfg.model, cfg.weights)
    classes = getattr(model, "num_classes", None)
    names = meta.get("classes") if isinstance(meta, dict) else meta   # a task's meta dict
    task = instantiate(cfg.task)
    if names and classes and classes != len(names) and rank == 0 and \
            task.name == "classification":
        print(f"eval: the model predicts {classes} classes, the data has {len(names)}: the "
              "scores compare class numbers (fine-tune a head for the data first: "
              "tianyuan train task.finetune.new_head=true ...)", flush=True)
    evaluator = task.evaluator(cfg, meta)
    metrics = inference(model, loader, evaluator, progress=cfg.progress and rank == 0,
                        distributed=world > 1)
    data = cfg.data
    result = {"model": cfg.model.get("name", cfg.model._target_), "weights": cfg.weights,
              "data": data.get("kind", data._target_), "root": data.get("root"),
              "classes": len(names or []), **metrics, "processes": world,
              "preprocessing": {**(pre or {}), "source": source}}
    if rank:
        return result
    write_json(cfg.out, result)
    if getattr(evaluator, "summary", None):   # a printout of the metric's own (pycocotools)
        print(evaluator.summary)
    rows = [{k: v for k, v in result.items()
             if k not in ("preprocessing", "root") and not isinstance(v, (dict, list))}]
    print(format_table(rows, title="\neval"))
    written = ", ".join(str(p) for p in (cfg.out, getattr(evaluator, "results_file", None)) if p)
    print(f"preprocessing ({source}): {pre or 'as the data builder gives'}\nwritten: {written}")
    return result


def eval_main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(usage("eval", "eval", ("model", "data")))
        return 0
    evaluate(compose("eval", argv))
    return 0


def bench(cfg):
    """Latency/throughput/memory of the configured model at cfg.batch and cfg.precision."""
    if dist.world_size() > 1:
        raise ValueError("bench: runs in one process (processes sharing the cores would time "
                         "each other)")
    use_threads(cfg.num_threads)
    model = build_model(cfg.model, cfg.get("weights"), command="bench")
    if cfg.precision == "int8":
        model = _int8(model, cfg)
    elif cfg.precision != "fp32":
        raise ValueError(f"bench: precision must be fp32 or int8, got {cfg.precision!r}")
    elif cfg.get("fuse", True) and hasattr(model, "fuse_groups"):
        from tianyuan import quantization as Q
        model = Q.fuse(model, model.fuse_groups())  # conv + BN + act as one kernel in eval
    if cfg.get("trace", False):  # as deployed: the layers' calls with no Python between them
        model = ty.jit.trace(model.eval(), example_input(cfg.batch, tuple(cfg.input_size)))
    stats = benchmark(model, cfg.batch, tuple(cfg.input_size), cfg.repeats, cfg.warmup)
    result = {"model": cfg.model.get("name", cfg.model._target_), "precision": cfg.precision,
              "traced": bool(cfg.get("trace", False)), **stats}
    write_json(cfg.out, result)
    columns = ["model", "precision", "traced", "batch", "latency_ms", "latency_p90_ms",
               "images_per_s", "peak_traced_mb", "peak_rss_mb", "threads", "isa"]
    print(format_table([result], columns, title="\nbench"))
    print(f"written: {cfg.out}")
    return result


def _int8(model, cfg):
    """PTQ on random inputs: latency only (the accuracy of int8 is `tianyuan quantize`'s)."""
    import numpy as np
    from tianyuan import quantization as Q
    from .classification import prepare_qat
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((cfg.batch, *cfg.input_size)).astype(np.float32)
               for _ in range(2)]
    return Q.quantize(Q.calibrate(prepare_qat(model, cfg.get("qconfig", "calibration")),
                                  batches))


def bench_main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(usage("bench", "bench", ("model",)))
        return 0
    bench(compose("bench", argv))
    return 0


__all__ = ["bench", "bench_main", "build_data", "build_model", "choose_preprocessing",
           "eval_main", "evaluate", "to_dict"]
