"""The evaluator protocol every task's metric follows, and the one loop that drives it.

An evaluator scores a model's outputs batch by batch and turns them into metrics:

    reset()                      forget what was seen
    process(batch, outputs)      record what it needs of one batch (JSON-able records)
    evaluate() -> {metric: ...}  the metrics over every record

Its records are kept in `self.records` (a list). Data-parallel, each process scores its
share of the split and `inference` gathers every process's records on process 0, which
evaluates them; the result goes back to every process. So an evaluator never talks to
other processes (detectron2's DatasetEvaluator, with the gather moved into the driver).

>>> evaluator = ClassificationEvaluator(topk=(1, 5))
>>> inference(model, val_loader, evaluator)               # {"top1": ..., "top5": ..., ...}
"""
import time

import tianyuan as ty
from tianyuan import distributed as dist
from tianyuan.progress import progress as progress_bar


class Evaluator:
    """Base of the protocol: `records` collected by `process`, turned into metrics by
    `evaluate` (which must take the records of every process, in any order)."""

    name = "evaluator"

    def __init__(self):
        self.records = []

    def reset(self):
        self.records = []

    def process(self, batch, outputs):
        raise NotImplementedError

    def evaluate(self):
        raise NotImplementedError

    def forward(self, model, batch):
        """The model's outputs for one batch (a classifier: logits of batch["image"])."""
        return model(ty.tensor(batch["image"]))

    def postfix(self):
        """A short running figure for the progress bar, or None."""
        return None


def inference(model, loader, evaluator, progress=True, distributed=None, desc=None):
    """evaluator's metrics of `model` (in eval mode, no gradients) over `loader`, plus
    "seconds". `distributed` (default: when started by an MPI launcher with several
    processes): the loader holds this process's share; the records meet on process 0 and
    every process gets the result."""
    distributed = dist.world_size() > 1 if distributed is None else distributed
    model.eval()
    evaluator.reset()
    started = time.perf_counter()
    bar = progress_bar(loader, desc or f"eval {evaluator.name}", unit="batch",
                       disable=not progress)
    with ty.no_grad():
        for batch in bar:
            evaluator.process(batch, evaluator.forward(model, batch))
            shown = evaluator.postfix()
            if shown:
                bar.set_postfix_str(shown, refresh=False)
    if distributed:
        gathered = dist.gather_json(evaluator.records)
        result = None
        if gathered is not None:          # process 0: every process's records
            evaluator.records = [record for part in gathered for record in part]
            result = evaluator.evaluate()
        result = dist.broadcast_json(result)
    else:
        result = evaluator.evaluate()
    return {**result, "seconds": round(time.perf_counter() - started, 3)}
