"""`BatchSampler`: the rows of a dataset in batches, an order of each epoch's own, maybe one shard of them."""

from __future__ import annotations

import operator
import secrets
from collections.abc import Iterator

import numpy as np

__all__ = ["BatchSampler"]

_SEED_MASK = (1 << 64) - 1


class BatchSampler:
    """Draws the rows of a dataset in batches, once each per epoch.

    Each iteration is an epoch. When it shuffles, every epoch has an order of
    its own, which the seed and the number of the epoch decide, so two
    samplers given one seed draw the same rows.

    A sampler can draw only one shard of the rows, for one of several
    processes that each read a part of every batch, as with PyTorch's
    DistributedSampler: the rows of an epoch are dealt out in turn, after the
    first ones are repeated until every shard has as many. The shards must be
    given one seed, so that they deal out the same order.

    Args:
        size: How many rows there are.
        batch_size: How many rows a batch has, the last one maybe fewer. With
            shards, the rows of a batch of one shard.
        shuffle: Whether to draw the rows in an order of each epoch's own.
            Otherwise they are drawn in their order.
        drop_last: Whether to leave out the last batch when it has fewer rows.
        seed: What decides the orders. Defaults to a seed of the sampler's own.
        shard: Which shard to draw, and of how many.

    Raises:
        ValueError: If the batch size is not positive, or the shard is not one
            of its count; also if the size is negative.
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int | None = None,
        shard: tuple[int, int] = (0, 1),
    ):
        size, batch_size = operator.index(size), operator.index(batch_size)
        rank, count = (operator.index(value) for value in shard)
        if size < 0:
            raise ValueError(f"the number of rows cannot be negative: {size}")
        if batch_size < 1:
            raise ValueError(f"the batch size must be positive: {batch_size}")
        if count < 1 or not 0 <= rank < count:
            raise ValueError(f"shard {rank} is not one of {count}")
        self._size = size
        self._batch_size = batch_size
        self._shuffle = bool(shuffle)
        self._drop_last = bool(drop_last)
        self._seed = secrets.randbits(64) if seed is None else operator.index(seed) & _SEED_MASK
        self._shard = (rank, count)
        self._epoch = 0

    @property
    def batch_size(self) -> int:
        """How many rows a batch has."""
        return self._batch_size

    @property
    def shard(self) -> tuple[int, int]:
        """Which shard is drawn, and of how many."""
        return self._shard

    @property
    def epoch(self) -> int:
        """The epoch the next iteration draws."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration draws.

        Raises:
            ValueError: If the epoch is negative.
        """
        epoch = operator.index(epoch)
        if epoch < 0:
            raise ValueError(f"an epoch cannot be negative: {epoch}")
        self._epoch = epoch

    def order(self, epoch: int) -> np.ndarray:
        """The rows of the shard in the order an epoch draws them."""
        if self._shuffle:
            rows = np.random.default_rng([self._seed, operator.index(epoch)]).permutation(self._size)
        else:
            rows = np.arange(self._size, dtype=np.int64)
        rank, count = self._shard
        if count > 1:
            rows = np.resize(rows, -(-self._size // count) * count)[rank::count]
        return rows

    def __len__(self) -> int:
        """How many batches an epoch has."""
        rows = -(-self._size // self._shard[1])
        return rows // self._batch_size if self._drop_last else -(-rows // self._batch_size)

    def __iter__(self) -> Iterator[np.ndarray]:
        """Draw the batches of the next epoch, and count it drawn."""
        epoch = self._epoch
        self._epoch += 1
        return self._batches(self.order(epoch))

    def _batches(self, rows: np.ndarray) -> Iterator[np.ndarray]:
        for first in range(0, len(self) * self._batch_size, self._batch_size):
            yield rows[first : first + self._batch_size]

    def __repr__(self) -> str:
        return (
            f"BatchSampler(size={self._size}, batch_size={self._batch_size}, shuffle={self._shuffle}, "
            f"drop_last={self._drop_last}, shard={self._shard}, epoch={self._epoch})"
        )
