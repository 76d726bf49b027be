import numpy as np
import pytest

from tianyuan.datasets import (BatchSampler, DataLoader, DistributedSampler,
                               GroupedAspectRatioBatchSampler, InfiniteSampler, RandomSampler,
                               SequentialSampler, default_collate)


def test_sequential_and_random():
    assert list(SequentialSampler(4)) == [0, 1, 2, 3]
    sampler = RandomSampler(10, seed=3)
    first = list(sampler)
    assert sorted(first) == list(range(10)) and first == list(RandomSampler(10, seed=3))
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert len(list(RandomSampler(5, replacement=True, num_samples=12))) == 12
    with pytest.raises(ValueError, match="replacement"):
        RandomSampler(5, num_samples=6)


@pytest.mark.parametrize("num,world", [(10, 4), (8, 4), (3, 4)])
def test_distributed_pads_so_every_rank_sees_the_same_count(num, world):
    shards = [list(DistributedSampler(num, rank, world, seed=1)) for rank in range(world)]
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) == -(-num // world)
    assert set(sum(shards, [])) == set(range(num))
    dropped = [list(DistributedSampler(num, r, world, drop_last=True)) for r in range(world)]
    assert all(len(s) == num // world for s in dropped)
    assert len(set(sum(dropped, []))) == num // world * world


@pytest.mark.parametrize("num, world", [(10, 3), (2, 4), (9, 3), (0, 2)])
def test_distributed_exact_shares_hold_each_index_once(num, world):
    shares = [list(DistributedSampler(num, r, world, shuffle=True, seed=1, exact=True))
              for r in range(world)]
    assert sorted(i for share in shares for i in share) == list(range(num))
    assert [len(s) for s in shares] == [len(DistributedSampler(num, r, world, exact=True))
                                        for r in range(world)]
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    with pytest.raises(ValueError, match="exact or drop_last"):
        DistributedSampler(num, 0, world, exact=True, drop_last=True)


def test_infinite_sampler_continues_past_an_epoch():
    stream = iter(InfiniteSampler(4, seed=0))
    first = [next(stream) for _ in range(12)]
    assert all(sorted(first[i:i + 4]) == [0, 1, 2, 3] for i in range(0, 12, 4))
    rank1 = iter(InfiniteSampler(4, shuffle=False, rank=1, world_size=2))
    assert [next(rank1) for _ in range(4)] == [1, 3, 1, 3]
    loader = DataLoader(list(range(5)), batch_size=3,
                        sampler=InfiniteSampler(5, shuffle=False), collate_fn=list)
    batches = iter(loader)
    assert [next(batches) for _ in range(3)] == [[0, 1, 2], [3, 4, 0], [1, 2, 3]]


def test_grouped_aspect_ratio_batches():
    ratios = [1.5, 0.5, 1.3, 0.7, 2.0, 0.6, 1.1]
    sampler = GroupedAspectRatioBatchSampler(SequentialSampler(7), ratios, batch_size=2)
    batches = list(sampler)
    assert sorted(sum(batches, [])) == list(range(7)) and len(batches) == len(sampler) == 4
    for batch in batches:
        assert len({ratios[i] >= 1 for i in batch}) == 1
    assert list(GroupedAspectRatioBatchSampler(SequentialSampler(7), ratios, 2,
                                               drop_last=True)) == [[0, 2], [1, 3], [4, 6]]


def test_batch_sampler_and_collate():
    assert list(BatchSampler(SequentialSampler(5), 2)) == [[0, 1], [2, 3], [4]]
    assert len(BatchSampler(SequentialSampler(5), 2, drop_last=True)) == 2
    batch = default_collate([{"a": np.zeros(3), "n": 1, "f": 0.5, "v": np.zeros(i), "i": {"k": i}}
                             for i in range(2)] + [None])
    assert batch["a"].shape == (2, 3) and batch["n"].dtype == np.int64
    assert batch["f"].dtype == np.float32 and isinstance(batch["v"], list)
    assert batch["i"] == [{"k": 0}, {"k": 1}]
    assert default_collate([(np.ones(2), 3)] * 2)[1].tolist() == [3, 3]
