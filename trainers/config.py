"""Hydra configs through the compose API: `tianyuan train experiment=x a.b=c` composes
trainers/conf/train.yaml with the overrides, without hydra taking over the process (no
output folder, no logging setup, no change of working directory).

Resolvers: `${ty.scale_lr:0.1,${data.batch_size},256}` is the linear scaling rule
(Goyal et al. 2017): base LR x batch / base batch.

>>> cfg = compose("train", ["experiment=smoke_shapesnet", "trainer.max_iters=20"])
"""
import difflib
import os

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf")


def _register_resolvers():
    if not OmegaConf.has_resolver("ty.scale_lr"):
        OmegaConf.register_new_resolver(
            "ty.scale_lr", lambda lr, batch, base: float(lr) * float(batch) / float(base))


# keys that moved into the classification task's config (trainers/conf/task/)
MOVED = {"finetune.": "task.finetune.", "loss.label_smoothing": "task.label_smoothing",
         "topk": "task.topk"}


def compose(config_name, overrides=()):
    """The composed config `config_name` (train, eval, bench) with hydra-style overrides.
    `key=None` is refused: hydra reads None as the string "None" (data.root=None had made a
    folder ./None); no value is `key=null`."""
    for item in overrides:
        key, sep, value = item.partition("=")
        for old, new in MOVED.items():
            if key.lstrip("+") == old or (old.endswith(".") and key.lstrip("+").startswith(old)):
                raise ValueError(f"{item}: {old.rstrip('.')} is now {new.rstrip('.')} "
                                 f"(write {key.lstrip('+').replace(old, new, 1)}={value})")
        if sep and value.strip() in ("None", "none"):
            raise ValueError(f"{item}: hydra reads {value.strip()} as the string "
                             f"{value.strip()!r}; for no value write {key}=null")
    _register_resolvers()
    try:
        return _compose(config_name, overrides)
    except Exception as error:
        if type(error).__name__ != "ConfigCompositionException":
            raise
        _suggest(config_name, overrides, error)
        raise


def _compose(config_name, overrides):
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None, job_name="tianyuan"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def _suggest(config_name, overrides, error):
    """Where hydra could not override a key the config lacks (a typo: it suggests '+key' to
    add one), name the nearest real key instead."""
    groups = [o for o in overrides if "." not in o.partition("=")[0]]
    try:
        base = OmegaConf.to_container(_compose(config_name, groups))
    except Exception:
        return
    keys = list(_dotted(base))
    for item in overrides:
        key = item.partition("=")[0]
        if "." not in key or key[0] in "+~" or key in keys:
            continue
        near = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}?" if near else "no such key in the config"
        raise ValueError(f"{item}: {key} is not a key of the {config_name} config; {hint} "
                         f"(+{key}=... adds a new key)") from error


def _dotted(tree, prefix=""):
    for key, value in tree.items():
        name = f"{prefix}{key}"
        yield name
        if isinstance(value, dict):
            yield from _dotted(value, name + ".")


def options(group):
    """The config names of a group (`options("experiment")`), sorted."""
    folder = os.path.join(CONF_DIR, group)
    return sorted(name[:-5] for name in os.listdir(folder) if name.endswith(".yaml"))


def to_dict(cfg):
    """A plain, resolved dict (for checkpoints and JSON)."""
    return OmegaConf.to_container(cfg, resolve=True)


def usage(command, config_name, groups):
    lines = [f"usage: tianyuan {command} [group=option ...] [key=value ...]", "",
             f"hydra overrides of trainers/conf/{config_name}.yaml; groups:"]
    lines += [f"  {group:<11} {', '.join(options(group))}" for group in groups]
    return "\n".join(lines)


def use_threads(count):
    """`count` threads for the native kernels where given; else, with several mpiexec
    processes on this machine, this process's share of its cores (distributed)."""
    import tianyuan as ty
    if count:
        ty.set_num_threads(int(count))
    elif ty.distributed.local_size() > 1:
        ty.set_num_threads(ty.distributed.threads_per_process())
