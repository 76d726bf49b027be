"""`tianyuan quantize`: float -> int8 by post-training calibration (PTQ) and/or quantization-
aware training (QAT), then the QuantReport (trainers/conf/quantize.yaml).

    tianyuan quantize model=resnet18 weights=r18.safetensors method=ptq data.root=/data/imagenet
    tianyuan quantize experiment=resnet18_imagenet_qat weights=r18.safetensors method=both \\
        data.root=/data/imagenet qat.epochs=1
    tianyuan quantize experiment=shapesnet_shapes_qat \\
        weights=runs/shapesnet_shapes/model_final.safetensors

PTQ: quantize_qat(calib_qconfig) + calibrate on `calib_batches` training batches (evaluation
preprocessing, shuffled) + quantize. QAT: quantize_qat(quant.qconfig) + the shared trainer
(train.build) for the QAT schedule + quantize. `quant.keep_float=[fc]` keeps the named
submodules float in both (say, the layers the report's SQNR list puts last);
`quant.max_drop=0.5` keeps the most sensitive layers float in PTQ, one at a time, until the
drop is within 0.5 points (trainers/quant_budget.py). Prints the
table, writes the JSON (`out=`). `export.dir=DIR` also saves each int8 model traced (for any
batch size) as DIR/ptq.graph, DIR/qat.graph: what `tianyuan run` and
`tianyuan.runtime.load` run without the model's code.
"""
import copy
import itertools
import os
import sys
import time

import numpy as np
from hydra.utils import instantiate
from omegaconf import open_dict

import tianyuan as ty
from tianyuan import quantization as Q
from tianyuan.evaluation import QuantReport, inference
from tianyuan.evaluation.benchmark import peak_rss_mb
from tianyuan.progress import progress

from .classification import prepare_qat
from .commands import _card, build_model, choose_preprocessing
from .config import compose, usage, use_threads
from .quant_budget import mark_keep_float, within_budget
from .train import GROUPS, build

METHODS = {"ptq": ("ptq",), "qat": ("qat",), "both": ("ptq", "qat")}


def ptq(model, batches, qconfig="calibration", keep_float=(), forward=None):
    """Post-training quantization: calibrate the observers on `batches` (each run by
    `forward(model, batch)`, default model(batch)), then int8; `keep_float`: submodules left
    float (as in `prepare_qat`)."""
    return Q.quantize(Q.calibrate(prepare_qat(model, qconfig, keep_float), batches, forward))


def qat(cfg, model):
    """Quantization-aware training of a copy of `model` with the shared trainer; returns
    (int8 model, iterations trained). Stopped by SIGINT/SIGTERM, it raises KeyboardInterrupt
    after the trainer's checkpoint: a user who interrupts wants no report of half a run."""
    with open_dict(cfg):
        cfg.trainer.max_epochs, cfg.trainer.max_iters = cfg.qat.epochs, cfg.qat.iters
        cfg.quant.method = "qat"
        if "finetune" in cfg.task:                # the model has its weights and head
            cfg.task.finetune.weights = None
            cfg.task.finetune.new_head = False
    trainer = build(cfg, model=copy.deepcopy(model))
    trainer.train(resume=cfg.trainer.resume)
    if trainer.stop_requested:
        raise KeyboardInterrupt(f"QAT stopped by a signal at iteration {trainer.iter}")
    return Q.quantize(trainer.model), trainer.iter


def _loaders(cfg, task, pre):
    """(calibration loader, validation loader, meta) of the task (Task.quant_data: for most,
    the data config's shuffled training split with the evaluation preprocessing, and its
    validation split)."""
    calib, val, meta = task.quant_data(cfg, pre)
    if calib is None or val is None:
        raise ValueError(f"quantize: the data config ({cfg.data._target_}) must give a "
                         "training loader (calibration, QAT) and a validation loader")
    return calib, val, meta


def _check(cfg):
    """The settings' errors, before anything is built."""
    if cfg.export.dir and cfg.task._target_.rsplit(".", 1)[-1] != "ClassificationTask":
        raise ValueError("quantize: export.dir traces classifiers only for now (a detector's "
                         "or generator's graph needs its post-processing as runtime steps)")
    if cfg.method not in METHODS:
        raise ValueError(f"quantize: method must be one of {sorted(METHODS)}, "
                         f"got {cfg.method!r}")
    if cfg.quant.get("max_drop") is not None and "ptq" not in METHODS[cfg.method]:
        raise ValueError("quantize: quant.max_drop keeps layers float in PTQ: use method=ptq "
                         "or method=both")
    if ty.distributed.world_size() > 1:
        raise ValueError("quantize: runs in one process; for data-parallel QAT use "
                         "'mpiexec -n N tianyuan train quant.method=qat ...'")


def _int8_models(cfg, model, marked, calibrate, info):
    """{"ptq": ..., "qat": ...} as cfg.method asks; each one's settings and time into info.
    `marked`: the model with quant.keep_float applied, for PTQ (QAT's trainer applies it)."""
    int8 = {}
    if "ptq" in METHODS[cfg.method]:
        started = time.perf_counter()
        int8["ptq"] = calibrate(marked, progress_bar=True)
        info["ptq"] = {"calib_batches": cfg.calib_batches, "qconfig": cfg.calib_qconfig,
                       "seconds": round(time.perf_counter() - started, 1)}
    if "qat" in METHODS[cfg.method]:
        started = time.perf_counter()
        int8["qat"], iters = qat(cfg, model)
        info["qat"] = {"iterations": iters, "epochs": cfg.qat.epochs, "lr": cfg.optim.lr,
                       "qconfig": cfg.quant.qconfig, "out_dir": cfg.out_dir,
                       "seconds": round(time.perf_counter() - started, 1)}
    return int8


def run(cfg):
    """Quantize as configured; returns the QuantReport (also printed and written to cfg.out)."""
    _check(cfg)
    use_threads(cfg.num_threads)
    task = instantiate(cfg.task)
    pre, source = choose_preprocessing(cfg, _card(cfg.model), "quantize")
    calib, val, meta = _loaders(cfg, task, pre)
    evaluator = task.evaluator(cfg, meta)
    if evaluator is None:
        raise ValueError(f"quantize: the {task.name} task gives no evaluation for this "
                         "config (a GAN's needs task.fid.stats=the real images' statistics)")
    model = build_model(cfg.model, cfg.weights, command="quantize").eval()
    info = {"model": cfg.model.get("name", cfg.model._target_), "weights": cfg.weights,
            "method": cfg.method, "data": cfg.data.get("kind", cfg.data._target_),
            "preprocessing": {**(pre or {}), "source": source}}
    keep_float = list(cfg.quant.get("keep_float") or ())   # both methods (QAT: train.build)
    example = task.quant_inputs(model, val, cfg.report.sensitivity_images)
    if keep_float:
        info["keep_float"] = list(keep_float)
    task_float = task.quant_keep_float(model)   # whole parts (a GAN's discriminator)

    def calibrate(marked, progress_bar=False):
        """PTQ of `marked` on cfg.calib_batches training batches (the task's forward)."""
        count = min(cfg.calib_batches, len(calib))
        batches = progress(itertools.islice(calib, count), "calibrate", total=count,
                           unit="batch", disable=not (progress_bar and cfg.trainer.progress))
        return ptq(marked, batches, cfg.calib_qconfig, task_float, evaluator.forward)

    def evaluate(m):
        return task.report_metrics(inference(m, val, evaluator, progress=cfg.trainer.progress))
    marked = (mark_keep_float(model, keep_float, example, task.quant_forward) if keep_float
              else model)
    int8 = _int8_models(cfg, model, marked, calibrate, info)
    report = QuantReport.measure(model, int8, evaluate, example, tuple(cfg.report.batches),
                                 cfg.report.repeats, worst=cfg.report.worst, info=info,
                                 show_progress=cfg.trainer.progress, metric=task.metric,
                                 mode=task.mode, forward=task.quant_forward,
                                 compare_output=task.quant_output_comparable(model))
    if cfg.quant.get("max_drop") is not None:
        report.info["budget"] = within_budget(cfg, report, model, int8.get("ptq"), calibrate,
                                              evaluate, example, task.quant_forward,
                                              keep_float, task.mode)
    report.info["peak_rss_mb"] = round(peak_rss_mb(), 1)      # the whole run's, to here
    report.save(cfg.out)
    print(report.table())
    print(f"written: {cfg.out}")
    if cfg.export.dir:
        export(int8, example, cfg.export.dir, cfg.export.batch)
    return report


def export(int8, example, folder, batch):
    """Each int8 model traced (jit.trace, any batch size, checked on `batch` and one more)
    on the example images and saved as folder/{method}.graph, for `tianyuan run` and
    `tianyuan.runtime.load`."""
    os.makedirs(folder, exist_ok=True)
    images = np.resize(example, (batch,) + example.shape[1:])   # repeats if batch > len
    for method, model in int8.items():
        path = os.path.join(folder, f"{method}.graph")
        ty.jit.trace(model.eval(), ty.tensor(images), dynamic_batch=True).save(path)
        print(f"written: {path} (any batch; tianyuan run {path} --profile)")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(usage("quantize", "quantize", GROUPS))
        return 0
    run(compose("quantize", argv))
    return 0


__all__ = ["main", "ptq", "qat", "run"]
