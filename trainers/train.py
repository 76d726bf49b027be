"""`tianyuan train experiment=<name> [overrides]`: the config is unpacked here, once; below
this file every builder takes explicit arguments.

    tianyuan train experiment=smoke_shapesnet trainer.max_iters=20
    tianyuan train experiment=resnet50_imagenet data.root=/data/imagenet trainer.resume=true
    tianyuan train experiment=resnet18_cifar10 data.root=~/cifar \\
        task.finetune.weights=r18.safetensors task.finetune.new_head=true
    mpiexec -n 4 tianyuan train experiment=resnet50_imagenet data.root=...   # data-parallel

Writes out_dir/config.yaml, log.jsonl, checkpoints/, best.safetensors,
model_final.safetensors and results.json; prints a results table.
"""
import os
import sys

from hydra.utils import instantiate
from omegaconf import OmegaConf

import tianyuan as ty
from tianyuan import distributed as dist
from tianyuan.evaluation.report import format_table, write_json

from .classification import prepare_qat
from .config import compose, to_dict, usage, use_threads
from .engine import CheckpointHook, EvalHook, Trainer, seed_everything
from .quant_budget import mark_keep_float

GROUPS = ("experiment", "task", "model", "data", "optim", "schedule", "quant")


def build(cfg, model=None):
    """The Trainer for a composed train config: cfg.task's data, model (or `model`),
    optimizers, schedules and evaluator, with the checkpoint and evaluation hooks."""
    seed_everything(cfg.seed)
    use_threads(cfg.trainer.num_threads)
    task = instantiate(cfg.task)
    train_loader, val_loader, meta = task.build_data(cfg)
    model = task.build_model(cfg, meta) if model is None else model
    model = _prepare(cfg, model, task, val_loader if val_loader is not None else train_loader)
    optimizers = task.optimizers(cfg, model)
    epochs, per_epoch = cfg.trainer.max_epochs, len(train_loader)
    if epochs is None:   # counted in iterations: the schedule spans max_iters
        if not cfg.trainer.max_iters:
            raise ValueError("train: trainer.max_epochs=null needs trainer.max_iters")
        epochs = cfg.trainer.max_iters / max(1, per_epoch)
    schedulers = task.schedulers(cfg, optimizers, epochs, per_epoch)
    hooks = [CheckpointHook(cfg.trainer.checkpoint_every, cfg.trainer.keep_last),
             *task.hooks(cfg)]
    evaluator = task.evaluator(cfg, meta) if val_loader is not None else None
    if evaluator is not None:
        hooks.insert(0, EvalHook(evaluator, val_loader, task.metric, cfg.trainer.eval_every,
                                 task.mode, cfg.trainer.get("eval_every_iters")))
    return Trainer(task, model, optimizers, train_loader, cfg.trainer.max_epochs, cfg.out_dir,
                   cfg.trainer.max_iters, schedulers, hooks, config=to_dict(cfg),
                   log_every=cfg.trainer.log_every, progress=cfg.trainer.progress)


def _prepare(cfg, model, task, loader):
    """Synchronised batch norm or QAT modules, as the config asks (any task's model; the
    task's own float parts, as a GAN's discriminator, stay float). quant.keep_float's layers
    stay float, re-quantized after where an int8 layer reads them (quant_budget's marking, in
    the order one input of `loader` runs)."""
    if cfg.trainer.get("sync_bn"):
        if cfg.quant.method is not None:
            raise ValueError("train: trainer.sync_bn is for float training (QAT's fused "
                             "ConvBn2d keeps its own batch norm)")
        ty.nn.convert_sync_batchnorm(model)
    if cfg.quant.method == "qat":
        keep_float = list(cfg.quant.get("keep_float") or ())
        if keep_float:
            example = task.quant_inputs(model, loader, 1)
            model = mark_keep_float(model, keep_float, example, task.quant_forward)
        return prepare_qat(model, cfg.quant.qconfig, task.quant_keep_float(model))
    if cfg.quant.method is not None:
        raise ValueError(f"train: quant.method must be null or 'qat', got {cfg.quant.method!r}")
    return model


def run(cfg):
    """Train with a composed config; returns the results dict (also out_dir/results.json)."""
    trainer = build(cfg)
    os.makedirs(cfg.out_dir, exist_ok=True)
    if dist.is_main():
        OmegaConf.save(cfg, os.path.join(cfg.out_dir, "config.yaml"), resolve=True)
    losses = trainer.train(resume=cfg.trainer.resume)
    eval_hook = next((h for h in trainer.hooks if isinstance(h, EvalHook)), None)
    result = {"name": cfg.name, "task": trainer.task.name, "iterations": trainer.iter,
              "epochs": trainer.epoch, "stopped": trainer.stop_requested,
              "train_loss": losses.get("loss"),
              **{f"train_{k}": v for k, v in losses.items() if k != "loss"},
              **{f"val_{k}": v for k, v in trainer.metrics.items()},
              **({f"best_{eval_hook.metric}": eval_hook.best} if eval_hook else {}),
              "out_dir": cfg.out_dir, "processes": dist.world_size(),
              **trainer.task.results(trainer)}
    if not dist.is_main():  # process 0 saved and reports
        return result
    write_json(os.path.join(cfg.out_dir, "results.json"), result)
    print(format_table([{"metric": k, "value": v} for k, v in result.items()
                        if v is not None and not isinstance(v, (dict, list))],
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
