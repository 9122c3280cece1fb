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


LARGE = 65_537  # one row past the epochs whose whole order numpy draws


@pytest.mark.parametrize("size,batch_size,count", [(LARGE, 1000, 1), (100_003, 4096, 1), (LARGE + 5, 700, 3)])
def test_large_epochs_draw_every_row_once_a_block_at_a_time(size, batch_size, count):
    shards = [
        BatchSampler(size, batch_size, shuffle=True, seed=9, shard=(rank, count)) for rank in range(count)
    ]
    drawn = [epoch_rows(sampler) for sampler in shards]
    assert [rows == sampler.order(0).tolist() for rows, sampler in zip(drawn, shards)] == [True] * count
    everything = np.sort(np.concatenate(drawn))
    order = BatchSampler(size, batch_size, shuffle=True, seed=9).order(0)
    np.testing.assert_array_equal(
        everything, np.sort(np.concatenate([order, order[: len(everything) - size]]))
    )
    np.testing.assert_array_equal(np.unique(everything), np.arange(size))
    assert drawn[0] != epoch_rows(shards[0]), "each epoch an order of its own"


def test_a_large_epoch_is_resumed_where_it_stopped():
    sampler = BatchSampler(LARGE * 2, 5000, shuffle=True, seed=4)
    batches = iter(sampler)
    for _ in range(15):  # past the first block worked out
        next(batches)
    resumed = BatchSampler(LARGE * 2, 5000, shuffle=True, seed=4)
    resumed.load_state_dict(sampler.state_dict())
    np.testing.assert_array_equal(np.concatenate(list(resumed)), np.concatenate(list(batches)))


def test_the_first_batch_of_an_epoch_never_draws_its_whole_order():
    """An epoch of 10^12 rows, whose order would take 8 TB: its batches are worked out as drawn."""
    sampler = BatchSampler(10**12, 64, shuffle=True, seed=0)
    first, second = next(iter(sampler)), next(iter(sampler))
    assert len(set(first.tolist()) | set(second.tolist())) == 128
    assert min(first.min(), second.min()) >= 0 and max(first.max(), second.max()) < 10**12


def test_where_the_rows_of_a_large_epoch_land_is_spread_evenly():
    order = BatchSampler(1_000_003, 64, shuffle=True, seed=1).order(0)
    size = len(order)
    # each tenth of the places holds a tenth of each tenth of the rows, as a uniform shuffle has it
    counts = np.histogram2d(np.arange(size), order, bins=10)[0]
    assert np.abs(counts / (size / 100) - 1).max() < 0.03, counts
    neighbours = np.abs(np.diff(order))  # rows side by side in the file do not stay side by side
    assert 0.018 < (neighbours < size // 100).mean() < 0.022
    assert abs(np.corrcoef(order[:-1], order[1:])[0, 1]) < 0.01
    # the first row of an epoch, over many seeds, is any of them alike (a chi-squared test)
    firsts = [next(iter(BatchSampler(LARGE, 1, shuffle=True, seed=seed)))[0] for seed in range(500)]
    counts = np.bincount(np.asarray(firsts) * 10 // LARGE, minlength=10)
    assert ((counts - 50) ** 2 / 50).sum() < 27.9  # the 0.999 quantile of 9 degrees of freedom
