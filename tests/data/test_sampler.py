"""BatchSampler: epochs, seeds, shards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitrio.data import BatchSampler


def epoch_rows(sampler: BatchSampler) -> list[int]:
    return [int(row) for batch in sampler for row in batch]


def test_unshuffled_batches_in_order():
    sampler = BatchSampler(10, 4)
    assert [list(batch) for batch in sampler] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(sampler) == 3
    dropping = BatchSampler(10, 4, drop_last=True)
    assert [len(batch) for batch in dropping] == [4, 4] and len(dropping) == 2


def test_each_epoch_draws_every_row_once_in_an_order_of_its_own():
    sampler = BatchSampler(100, 16, shuffle=True, seed=3)
    assert sampler.epoch == 0
    first = epoch_rows(sampler)
    assert sampler.epoch == 1
    second = epoch_rows(sampler)
    assert sorted(first) == sorted(second) == list(range(100))
    assert first != second
    assert first == sampler.order(0).tolist() and second == sampler.order(1).tolist()
    sampler.set_epoch(0)
    assert epoch_rows(sampler) == first


def test_one_seed_one_order_and_a_seed_of_its_own_otherwise():
    assert epoch_rows(BatchSampler(50, 7, True, seed=11)) == epoch_rows(BatchSampler(50, 7, True, seed=11))
    assert epoch_rows(BatchSampler(50, 7, True, seed=11)) != epoch_rows(BatchSampler(50, 7, True, seed=12))
    assert epoch_rows(BatchSampler(50, 7, True)) != epoch_rows(BatchSampler(50, 7, True))
    assert epoch_rows(BatchSampler(5, 2, True, seed=-1)) == epoch_rows(BatchSampler(5, 2, True, seed=-1))


@pytest.mark.parametrize("size,count,shuffle", [(10, 3, True), (12, 4, False), (5, 8, True), (0, 2, False)])
def test_shards_deal_out_every_row_and_are_as_long(size, count, shuffle):
    shards = [BatchSampler(size, 3, shuffle=shuffle, seed=5, shard=(rank, count)) for rank in range(count)]
    for epoch in range(2):
        drawn = [epoch_rows(sampler) for sampler in shards]
        lengths = {len(rows) for rows in drawn}
        assert len(lengths) == 1
        per_shard = -(-size // count)
        assert lengths == {per_shard}
        union = sorted(row for rows in drawn for row in rows)
        assert set(union) == set(range(size))
        order = BatchSampler(size, 3, shuffle=shuffle, seed=5).order(epoch).tolist()
        repeated = order[: per_shard * count - size] if size else []
        assert union == sorted(order + repeated)
        assert [len(sampler) for sampler in shards] == [-(-per_shard // 3)] * count


@pytest.mark.parametrize("size,count", [(10, 3), (11, 4), (3, 5)])
def test_unshuffled_shards_are_those_of_pytorchs_distributed_sampler(size, count):
    for rank in range(count):
        ours = BatchSampler(size, 2, shard=(rank, count)).order(0).tolist()
        theirs = list(torch.utils.data.DistributedSampler(range(size), count, rank, shuffle=False))
        assert ours == theirs


def test_errors():
    for batch_size in (0, -2):
        with pytest.raises(ValueError, match="batch size"):
            BatchSampler(10, batch_size)
    for shard in [(2, 2), (-1, 2), (0, 0)]:
        with pytest.raises(ValueError, match="shard"):
            BatchSampler(10, 2, shard=shard)
    with pytest.raises(ValueError, match="the number of rows cannot be negative: -1"):
        BatchSampler(-1, 2)
    with pytest.raises(ValueError, match="an epoch cannot be negative: -1"):
        BatchSampler(10, 2).set_epoch(-1)


def test_batches_are_integer_arrays():
    batch = next(iter(BatchSampler(10, 4, shuffle=True, seed=1)))
    assert isinstance(batch, np.ndarray) and batch.dtype.kind == "i"
