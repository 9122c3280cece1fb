"""`BatchSampler`: the rows of a dataset in batches, an order of each epoch's own, maybe one shard of them."""

from __future__ import annotations

import copy
import operator
import secrets
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

__all__ = ["BatchSampler"]

_SEED_MASK = (1 << 64) - 1
_STATE_VERSION = 2


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

    Its state, from state_dict, is where it has got to: the batch its latest
    iteration draws next, or, once that has been gone through to its end, the
    first of the next epoch. A sampler made with the same arguments and given
    it with load_state_dict draws from there on the batches this one would
    have, as PyTorch's StatefulDataLoader has it. The state holds the seed, so
    a sampler of a seed of its own takes it on.

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
        self._seed_given = seed is not None
        self._shard = (rank, count)
        self._epoch = 0
        self._skip = 0
        self._drawing: list[int] | None = None

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

        It draws it from its first batch, unless it is the epoch a loaded
        state resumes, which it then draws from where that state left off.

        Raises:
            ValueError: If the epoch is negative.
        """
        epoch = operator.index(epoch)
        if epoch < 0:
            raise ValueError(f"an epoch cannot be negative: {epoch}")
        if epoch != self._epoch:
            self._skip = 0
        self._epoch = epoch
        self._drawing = None

    def state_dict(self) -> dict[str, Any]:
        """Get where the sampler has got to, to resume from with load_state_dict.

        It may be asked for at any time, during an iteration too.

        Returns:
            Plain values, which pickle and JSON take: version, size,
            batch_size, shuffle, drop_last, seed, shard as [rank, count], and
            the batch drawn next, as the epoch and how many of its batches
            were drawn before it, batches.
        """
        epoch, batches = self._drawing if self._drawing is not None else (self._epoch, self._skip)
        return {
            "version": _STATE_VERSION,
            "size": self._size,
            "batch_size": self._batch_size,
            "shuffle": self._shuffle,
            "drop_last": self._drop_last,
            "seed": self._seed,
            "shard": list(self._shard),
            "epoch": epoch,
            "batches": batches,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from a state of state_dict: the next iteration draws the rest of its epoch.

        The seed is taken from the state, unless the sampler was given one.

        Args:
            state: A state of a sampler made with the same arguments.

        Raises:
            ValueError: If the state is not of such a sampler, saying what
                differs: its version, size, batch size, shuffle, drop_last,
                shard or a seed given, or its position is past an epoch.
        """
        expected = {
            "version": _STATE_VERSION,
            "size": self._size,
            "batch_size": self._batch_size,
            "shuffle": self._shuffle,
            "drop_last": self._drop_last,
            "shard": list(self._shard),
        }
        if self._seed_given:
            expected["seed"] = self._seed
        check_state(state, expected, "sampler")
        seed = state_count(state, "seed", _SEED_MASK)
        epoch = state_count(state, "epoch")
        batches = state_count(state, "batches", len(self))
        self._seed, self._epoch, self._skip, self._drawing = seed, epoch, batches, None

    def order(self, epoch: int) -> np.ndarray:
        """The rows of the shard in the order an epoch draws them."""
        return self._rows(operator.index(epoch), 0, -(-self._size // self._shard[1]))

    def _rows(self, epoch: int, start: int, stop: int) -> np.ndarray:
        """The rows the shard draws from place `start` to `stop` of the epoch's order: the rows of
        the epoch's order (`_Shuffle`) at every count-th place from the rank's, counting around
        past the end (as the first rows repeated there)."""
        rank, count = self._shard
        places = np.arange(start, stop, dtype=np.int64) * count + rank
        if count > 1:
            places %= max(self._size, 1)
        return _Shuffle(self._size, self._seed, epoch)[places] if self._shuffle else places

    def __len__(self) -> int:
        """How many batches an epoch has."""
        rows = -(-self._size // self._shard[1])
        return rows // self._batch_size if self._drop_last else -(-rows // self._batch_size)

    def __iter__(self) -> Iterator[np.ndarray]:
        """Draw the batches of the next epoch, and count it drawn."""
        epoch, skip = self._epoch, self._skip
        self._epoch, self._skip = epoch + 1, 0
        self._drawing = [epoch, skip]
        return self._batches(epoch, self._drawing)

    def _batches(self, epoch: int, drawing: list[int]) -> Iterator[np.ndarray]:
        """Yield the batches of an epoch from drawing[1] on, counting each in drawing as it is drawn:
        the rows of `_BLOCK_ROWS` or so worked out at a time, never the whole epoch's order at once."""
        count, size = len(self), self._batch_size
        rows, first = np.empty(0, np.int64), 0  # rows from place `first` of the shard's order
        per_block = max(1, _BLOCK_ROWS // size) * size
        while drawing[1] < count:
            start = drawing[1] * size
            drawing[1] += 1
            if not first <= start < first + len(rows):
                first = start
                rows = self._rows(epoch, start, min(start + per_block, -(-self._size // self._shard[1])))
            yield rows[start - first : start - first + size]
        if self._drawing is drawing:
            self._drawing = None

    def __repr__(self) -> str:
        return (
            f"BatchSampler(size={self._size}, batch_size={self._batch_size}, shuffle={self._shuffle}, "
            f"drop_last={self._drop_last}, shard={self._shard}, epoch={self._epoch})"
        )


class _Shuffle:
    """The order of an epoch that shuffles: a permutation of range(size), of the rows at any places
    worked out without the others.

    Of up to `_BLOCK_ROWS` rows, it is a permutation numpy draws, each one as likely. Of more, where
    the whole order would cost memory and time before the first batch, each place goes through a
    Feistel network of `_ROUNDS` rounds over the fewest bits, even in count, that hold size - 1, each
    round's function MurmurHash3's finalizer (of 32 bits where the places fit them, else of 64) of one
    half and a key of the seed and the epoch; a value past the end goes through it again until it
    lands within (cycle walking), which keeps the whole a permutation. Such an order is one of those
    its keys choose, not drawn from all permutations alike: where rows land is spread evenly, which
    tests/data/test_sampler.py checks.
    """

    def __init__(self, size: int, seed: int, epoch: int):
        self._drawn = None
        if size <= _BLOCK_ROWS:
            self._drawn = np.random.default_rng([seed, epoch]).permutation(size)
            return
        half = -(-max(size - 1, 1).bit_length() // 2)
        self._type = np.uint32 if size < 1 << 32 else np.uint64
        self._size, self._half, self._mask = (self._type(n) for n in (size, half, (1 << half) - 1))
        keys = np.random.default_rng([seed, epoch]).integers(0, 1 << 64, _ROUNDS, np.uint64)
        self._keys = keys.astype(self._type)  # the low bits where 32
        self._mix = [(self._type(shift), self._type(factor)) for shift, factor in _MIX[self._type]]

    def __getitem__(self, places: np.ndarray) -> np.ndarray:
        if self._drawn is not None:
            return self._drawn[places]
        rows = self._network(places.astype(self._type))
        past = np.flatnonzero(rows >= self._size)
        while len(past):
            rows[past] = self._network(rows[past])
            past = past[rows[past] >= self._size]
        return rows.astype(np.int64)

    def _network(self, values: np.ndarray) -> np.ndarray:
        left, right = values >> self._half, values & self._mask
        for key in self._keys:
            mixed = right ^ key
            for shift, factor in self._mix:
                mixed ^= mixed >> shift
                mixed *= factor
            mixed ^= mixed >> self._mix[0][0]
            left, right = right, left ^ (mixed & self._mask)
        return (left << self._half) | right


_ROUNDS = 4
_MIX = {
    np.uint32: ((16, 0x85EBCA6B), (13, 0xC2B2AE35)),
    np.uint64: ((33, 0xFF51AFD7ED558CCD), (33, 0xC4CEB9FE1A85EC53)),
}
"""MurmurHash3's finalizers of 32 and 64 bits: two xor-shifts each followed by a multiplication, then
the first xor-shift again."""
_BLOCK_ROWS = 1 << 16
"""About how many rows of an epoch's order are worked out at a time."""


def check_state(state: Mapping[str, Any], expected: Mapping[str, Any], owner: str) -> None:
    """Check that a state holds the values expected of it.

    Raises:
        ValueError: If state is not a mapping, or naming every expected value
            it lacks or holds otherwise.
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"the state of a {owner} is a dict, not {type(state).__name__}")
    differences = [
        f"{key} is {state[key]!r} in the state but {value!r} here" if key in state else f"no {key} in it"
        for key, value in expected.items()
        if key not in state or state[key] != value
    ]
    if differences:
        raise ValueError(f"the state does not fit this {owner}: {'; '.join(differences)}")


def state_count(state: Mapping[str, Any], key: str, most: int | None = None) -> int:
    """Get an integer of a state, from 0 to most.

    Raises:
        ValueError: If the state lacks it, or it is not such an integer.
    """
    value = state.get(key)
    is_count = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if not is_count or (most is not None and value > most):
        bound = "" if most is None else f" up to {most}"
        raise ValueError(f"{key} in the state is {value!r}, not an integer from 0{bound}")
    return value


def shard_of(batch_sampler: Any) -> int:
    """The shard a batch sampler draws: a BatchSampler's, or the rank of a sampler it batches
    (PyTorch's DistributedSampler); 0 for any other."""
    shard = getattr(batch_sampler, "shard", None)
    if shard is not None:
        return operator.index(shard[0])
    rank = getattr(getattr(batch_sampler, "sampler", None), "rank", 0)
    return rank if isinstance(rank, int) else 0


def is_stateful(sampler: Any) -> bool:
    """Whether a batch sampler has state_dict and load_state_dict."""
    return all(callable(getattr(sampler, name, None)) for name in ("state_dict", "load_state_dict"))


def sampler_state(batch_sampler: Any) -> dict[str, Any] | None:
    """A copy of a batch sampler's state, or None where it has no state_dict."""
    return copy.deepcopy(batch_sampler.state_dict()) if is_stateful(batch_sampler) else None


def tell_epoch(batch_sampler: Any, epoch: int) -> None:
    """Pass `epoch` on to a batch sampler and to the sampler it batches, each that has set_epoch.

    Raises:
        TypeError: If neither has set_epoch.
    """
    told = [
        part
        for part in (batch_sampler, getattr(batch_sampler, "sampler", None))
        if callable(getattr(part, "set_epoch", None))
    ]
    if not told:
        raise TypeError(f"the batch sampler has no set_epoch: {batch_sampler!r}")
    for part in told:
        part.set_epoch(epoch)


def restore_sampler(batch_sampler: Any, state: Any) -> None:
    """Load a batch sampler's `state`, as a loader's state holds it (None where it has no state_dict).

    Raises:
        ValueError: If the state and the batch sampler disagree on whether it has a state.
    """
    if is_stateful(batch_sampler):
        if state is None:
            raise ValueError("the state holds no state of the batch sampler, which has one")
        batch_sampler.load_state_dict(state)
    elif state is not None:
        raise ValueError("the state holds a state of the batch sampler, which has no load_state_dict")
