"""Samplers yield dataset indices; batch samplers yield lists of them.

Random ones are deterministic in (seed, epoch); the DataLoader calls `set_epoch` at
the start of every epoch.

>>> list(DistributedSampler(10, rank=1, world_size=4, shuffle=False))
[1, 5, 9, 3]
"""
import itertools

import numpy as np


def _length(data):
    return data if isinstance(data, int) else len(data)


class SequentialSampler:
    def __init__(self, data):
        self.num = _length(data)

    def __iter__(self):
        return iter(range(self.num))

    def __len__(self):
        return self.num


class RandomSampler:
    """A permutation per epoch (or `num_samples` draws with replacement)."""

    def __init__(self, data, seed=0, replacement=False, num_samples=None):
        self.num, self.seed, self.epoch = _length(data), int(seed), 0
        self.replacement = replacement
        self.num_samples = self.num if num_samples is None else int(num_samples)
        if not replacement and self.num_samples > self.num:
            raise ValueError(f"RandomSampler: num_samples={num_samples} > dataset size "
                             f"{self.num} needs replacement=True")

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.replacement:
            return iter(rng.integers(0, self.num, self.num_samples).tolist())
        return iter(rng.permutation(self.num)[:self.num_samples].tolist())

    def __len__(self):
        return self.num_samples


class DistributedSampler:
    """Rank `rank`'s share of a (shuffled) epoch. Without `drop_last` the index list is padded
    by repeating its start so every rank gets ceil(N / world_size) indices; with `exact`
    (evaluation) every index is in one share exactly once, the shares differing by one."""

    def __init__(self, data, rank, world_size, shuffle=True, seed=0, drop_last=False,
                 exact=False):
        if not 0 <= rank < world_size:
            raise ValueError(f"DistributedSampler: rank {rank} not in [0, {world_size})")
        if exact and drop_last:
            raise ValueError("DistributedSampler: exact shares neither drop nor pad; "
                             "give exact or drop_last, not both")
        self.num, self.rank, self.world_size = _length(data), rank, world_size
        self.shuffle, self.seed, self.epoch, self.drop_last = shuffle, int(seed), 0, drop_last
        self.exact = exact
        if exact:
            self.per_rank = len(range(rank, self.num, world_size))
        elif drop_last:
            self.per_rank = self.num // world_size
        else:
            self.per_rank = -(-self.num // world_size)

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.num)
        else:
            order = np.arange(self.num)
        if self.exact:
            return iter(order[self.rank::self.world_size].tolist())
        total = self.per_rank * self.world_size
        if total > self.num:
            order = np.resize(order, total)  # repeats from the start
        return iter(order[:total][self.rank::self.world_size].tolist())

    def __len__(self):
        return self.per_rank


class InfiniteSampler:
    """An endless stream: a fresh permutation (or 0..N-1) each pass, this rank's share."""

    def __init__(self, data, shuffle=True, seed=0, rank=0, world_size=1):
        self.num, self.shuffle, self.seed = _length(data), shuffle, int(seed)
        self.rank, self.world_size = rank, world_size

    def _stream(self):
        for lap in itertools.count():
            if self.shuffle:
                yield from np.random.default_rng([self.seed, lap]).permutation(self.num).tolist()
            else:
                yield from range(self.num)

    def __iter__(self):
        return itertools.islice(self._stream(), self.rank, None, self.world_size)


class BatchSampler:
    def __init__(self, sampler, batch_size, drop_last=False):
        if batch_size < 1:
            raise ValueError(f"BatchSampler: batch_size must be >= 1, got {batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        num = len(self.sampler)
        return num // self.batch_size if self.drop_last else -(-num // self.batch_size)


class GroupedAspectRatioBatchSampler(BatchSampler):
    """Batches whose images share an aspect-ratio group (landscape vs portrait by default, or
    `boundaries` on width/height), so padding to the batch's largest image wastes little.
    Leftovers at the end of a finite sampler are yielded per group unless `drop_last`."""

    def __init__(self, sampler, aspect_ratios, batch_size, boundaries=(1.0,), drop_last=False):
        super().__init__(sampler, batch_size, drop_last)
        self.groups = np.searchsorted(np.asarray(boundaries), np.asarray(aspect_ratios),
                                      side="right")

    def __iter__(self):
        buckets = {}
        for index in self.sampler:
            bucket = buckets.setdefault(int(self.groups[index]), [])
            bucket.append(index)
            if len(bucket) == self.batch_size:
                yield list(bucket)
                bucket.clear()
        if not self.drop_last:
            for group in sorted(buckets):
                if buckets[group]:
                    yield list(buckets[group])

    def __len__(self):
        counts = np.bincount(self.groups[list(self.sampler)])
        full = counts // self.batch_size
        return int(full.sum() if self.drop_last else (full + (counts % self.batch_size > 0)).sum())
