"""What the COCO-format data builders (detection.py's detection_data, keypoint_data.py's
keypoint_data) share: generated data written once, a split's paths, and the loaders'
sampling (the order a pure function of (seed, epoch); under an MPI launch each process its
share)."""
import os
import shutil
import tempfile

from tianyuan import distributed as dist
from tianyuan.datasets import BatchSampler, DataLoader, DistributedSampler, RandomSampler, \
    SequentialSampler


def synthetic_root(root, name):
    """`root`, or $TIANYUAN_HOME/synthetic/<name> for generated data without one."""
    if root is not None:
        return root
    from tianyuan.weights import tianyuan_home
    return os.path.join(tianyuan_home(), "synthetic", name)


def write_once(root, prefix, write):
    """`root` with `write(folder)`'s content, written once: in a temporary folder beside it,
    then renamed, so concurrent runs (data-parallel processes) never see half of it. Done
    when root/val/annotations.json exists."""
    if os.path.isfile(os.path.join(root, "val", "annotations.json")):
        return root
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=prefix)
    try:
        write(tmp)
        try:
            os.replace(tmp, root)
        except OSError:  # a concurrent run (another data-parallel process) renamed first
            if not os.path.isfile(os.path.join(root, "val", "annotations.json")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def split_paths(layouts, kind, root, split, given=None, op="data", what="COCO-format json"):
    """(images folder, annotation json) of a split: `given` {images, ann_file} (relative to
    root, or absolute) or the kind's layout in `layouts`; `op` names the builder."""
    given = dict(given or {})
    default = layouts.get(kind, {}).get(split, (None, None))
    images, ann_file = given.get("images") or default[0], given.get("ann_file") or default[1]
    if images is None or ann_file is None:
        raise ValueError(f"{op}: {kind} data needs data.{split}.images and "
                         f"data.{split}.ann_file (the image folder and the {what})")
    if root is None and not (os.path.isabs(images) and os.path.isabs(ann_file)):
        raise ValueError(f"{op}: data kind {kind!r} needs data.root (the dataset "
                         f"folder) or absolute data.{split}.images and data.{split}.ann_file")
    return (os.path.join(root or "", os.path.expanduser(images)),
            os.path.join(root or "", os.path.expanduser(ann_file)))


def train_sampler(dataset, seed):
    """Shuffled, a pure function of (seed, epoch); each process its share, incomplete
    batches dropped, under an MPI launch."""
    rank, world = dist.rank(), dist.world_size()
    return RandomSampler(dataset, seed) if world == 1 else \
        DistributedSampler(dataset, rank, world, shuffle=True, seed=seed, drop_last=True)


def val_loader(dataset, batch_size, num_workers, seed, collate_fn=None):
    """In order, every item exactly once over the processes."""
    rank, world = dist.rank(), dist.world_size()
    sampler = SequentialSampler(dataset) if world == 1 else \
        DistributedSampler(dataset, rank, world, shuffle=False, exact=True)
    extra = {"collate_fn": collate_fn} if collate_fn is not None else {}
    return DataLoader(dataset, batch_sampler=BatchSampler(sampler, batch_size),
                      num_workers=num_workers, seed=seed, **extra)
