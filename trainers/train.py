"""`tianyuan train experiment=<name> [overrides]`: the config is unpacked here, once; below
this file every builder takes explicit arguments.

    tianyuan train experiment=smoke_shapesnet trainer.max_iters=20
    tianyuan train experiment=resnet50_imagenet data.root=/data/imagenet trainer.resume=true
    tianyuan train experiment=resnet18_cifar10 data.root=~/cifar finetune.weights=r18.safetensors \\
        finetune.new_head=true finetune.freeze_backbone=true
    mpiexec -n 4 tianyuan train experiment=resnet50_imagenet data.root=...   # data-parallel

Writes out_dir/config.yaml, log.jsonl, checkpoints/, best.safetensors,
model_final.safetensors and results.json; prints a results table.
"""
import os
import sys
from functools import partial

from hydra.utils import instantiate
from omegaconf import OmegaConf

import tianyuan as ty
from tianyuan import distributed as dist
from tianyuan.evaluation.report import format_table, write_json

from .classification import (classification_evaluator, classification_forward, prepare_finetune,
                             prepare_qat)
from .config import compose, to_dict, usage, use_threads
from .engine import CheckpointHook, EvalHook, LRSchedulerHook, Trainer, seed_everything

GROUPS = ("experiment", "model", "data", "optim", "schedule", "quant")


def build(cfg, model=None):
    """The Trainer for a composed train config (and `model`, else cfg.model's)."""
    seed_everything(cfg.seed)
    use_threads(cfg.trainer.num_threads)
    train_loader, val_loader, classes = instantiate(cfg.data, seed=cfg.seed)
    model = instantiate(cfg.model) if model is None else model
    tune = cfg.finetune
    prepare_finetune(model, tune.weights, len(classes) if tune.new_head else None,
                     tune.freeze_backbone)
    if cfg.trainer.get("sync_bn"):
        if cfg.quant.method is not None:
            raise ValueError("train: trainer.sync_bn is for float training (QAT's fused "
                             "ConvBn2d keeps its own batch norm)")
        ty.nn.convert_sync_batchnorm(model)
    if cfg.quant.method == "qat":
        model = prepare_qat(model, cfg.quant.qconfig, list(cfg.quant.get("keep_float") or ()))
    elif cfg.quant.method is not None:
        raise ValueError(f"train: quant.method must be null or 'qat', got {cfg.quant.method!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = instantiate(cfg.optim)(params)
    scheduler = instantiate(cfg.schedule)(optimizer, epochs=cfg.trainer.max_epochs,
                                          iters_per_epoch=len(train_loader))
    hooks = [LRSchedulerHook(scheduler),
             EvalHook(classification_evaluator(val_loader, distributed=dist.world_size() > 1),
                      every=cfg.trainer.eval_every),
             CheckpointHook(cfg.trainer.checkpoint_every, cfg.trainer.keep_last)]
    forward = partial(classification_forward, label_smoothing=cfg.loss.label_smoothing)
    trainer = Trainer(model, optimizer, train_loader, forward, cfg.trainer.max_epochs,
                      cfg.out_dir, cfg.trainer.max_iters, hooks, config=to_dict(cfg),
                      log_every=cfg.trainer.log_every, progress=cfg.trainer.progress)
    return trainer


def run(cfg):
    """Train with a composed config; returns the results dict (also out_dir/results.json)."""
    trainer = build(cfg)
    os.makedirs(cfg.out_dir, exist_ok=True)
    if dist.is_main():
        OmegaConf.save(cfg, os.path.join(cfg.out_dir, "config.yaml"), resolve=True)
    losses = trainer.train(resume=cfg.trainer.resume)
    eval_hook = next(h for h in trainer.hooks if isinstance(h, EvalHook))
    result = {"name": cfg.name, "iterations": trainer.iter, "epochs": trainer.epoch,
              "stopped": trainer.stop_requested, "train_loss": losses.get("loss"),
              **{f"val_{k}": v for k, v in trainer.metrics.items()},
              "best_top1": eval_hook.best, "out_dir": cfg.out_dir,
              "processes": dist.world_size()}
    if not dist.is_main():  # process 0 saved and reports
        return result
    write_json(os.path.join(cfg.out_dir, "results.json"), result)
    print(format_table([{"metric": k, "value": v} for k, v in result.items() if v is not None],
                       title=f"\ntrain {cfg.name}"))
    return result


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(usage("train", "train", GROUPS))
        return 0
    if "--cfg" in argv:   # print the composed config and stop
        print(OmegaConf.to_yaml(compose("train", [a for a in argv if a != "--cfg"])))
        return 0
    result = run(compose("train", argv))
    return 130 if result["stopped"] else 0


if __name__ == "__main__":
    sys.exit(main())
