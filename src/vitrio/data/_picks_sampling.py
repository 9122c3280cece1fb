"""What a training set of picks in tomograms draws: background boxes, balanced classes, splits by tomogram.

Each works on plain arrays (the picks' voxels, labels and tomograms, the
tomograms' extents), so that any reader of picks feeds them. Every draw is
decided by a seed (and an epoch): two programs given the same draw the same.
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._types import integer_array
from ._sampler import BatchSampler, check_state

__all__ = ["BalancedBatchSampler", "background_centres", "class_weights", "split_by_tomogram"]

_SEED_MASK = (1 << 64) - 1
# How many rounds of candidates a tomogram's background is drawn in before it is called too full.
_ROUNDS = 64
# How many candidate-to-pick distances are held at once.
_DISTANCES_AT_ONCE = 1 << 22


def background_centres(
    picks: Mapping[str, Any],
    extents: Mapping[str, Sequence[int]],
    box: Sequence[int],
    count: int,
    min_distance: float,
    seed: int,
    epoch: int = 0,
) -> tuple[np.ndarray, list[str]]:
    """Draw centres of background boxes in tomograms, away from every pick and from the edges.

    The boxes are spread over the tomograms as evenly as can be (the first
    ones, in the order of their names, take one more). In each, a centre is
    a whole voxel drawn uniformly among those whose box of shape `box` (the
    centre at index extent // 2 of it) lies within the tomogram, kept if no
    pick of that tomogram is nearer than `min_distance` voxels. The seed,
    the epoch and the tomogram's name decide its draw: one seed and epoch
    give the same centres, and each epoch others.

    Args:
        picks: The (z, y, x) voxels of the picks of each tomogram, by name.
        extents: The (z, y, x) extents of each tomogram, by name.
        box: The (z, y, x) shape of a box.
        count: How many centres in all.
        min_distance: The least distance, in voxels, from a centre to any pick.
        seed: What decides the draws, with `epoch`.
        epoch: The epoch drawn for.

    Returns:
        The centres, a (z, y, x) row each, and the tomogram of each, tomogram by tomogram.

    Raises:
        ValueError: If there is no tomogram to draw in, a box does not fit in a tomogram, or a
            tomogram has too little room away from its picks for its share (naming it).
    """
    count, epoch = operator.index(count), operator.index(epoch)
    if count < 0 or epoch < 0 or not float(min_distance) >= 0:
        raise ValueError(
            f"count, epoch and min_distance are 0 or more, not {count}, {epoch} and {min_distance!r}"
        )
    names = sorted(extents)
    if not names:
        raise ValueError("there is no tomogram to draw background boxes in")
    box = np.asarray(box, dtype=np.int64)
    shares = np.full(len(names), count // len(names))
    shares[: count % len(names)] += 1
    centres, tomograms = [np.zeros((0, 3), np.int64)], []
    for name, share in zip(names, shares.tolist()):
        if share:
            rng = np.random.default_rng([operator.index(seed) & _SEED_MASK, epoch, zlib.crc32(name.encode())])
            points = np.asarray(picks.get(name, np.zeros((0, 3))), dtype=np.float64).reshape(-1, 3)
            centres.append(_draw_away(rng, name, extents[name], box, share, points, float(min_distance)))
            tomograms += [name] * share
    return np.concatenate(centres), tomograms


def _draw_away(
    rng: np.random.Generator,
    name: str,
    extents: Sequence[int],
    box: np.ndarray,
    share: int,
    picks: np.ndarray,
    min_distance: float,
) -> np.ndarray:
    """`share` voxels of one tomogram whose box lies within it, none nearer than `min_distance` to a pick."""
    low = box // 2
    high = np.asarray(extents, dtype=np.int64) - box + box // 2  # inclusive
    if (high < low).any():
        raise ValueError(f"tomogram {name!r} of extents {list(extents)} cannot hold a box of {box.tolist()}")
    kept: list[np.ndarray] = []
    held = 0
    for _ in range(_ROUNDS):
        candidates = rng.integers(low, high + 1, size=(max(64, 2 * (share - held)), 3))
        candidates = candidates[_far_from(candidates, picks, min_distance)]
        kept.append(candidates[: share - held])
        held += len(kept[-1])
        if held == share:
            return np.concatenate(kept)
    raise ValueError(
        f"tomogram {name!r}: found room for only {held} of {share} background boxes at least "
        f"{min_distance} voxels from its {len(picks)} picks; ask for fewer, or a smaller min_distance"
    )


def _far_from(candidates: np.ndarray, picks: np.ndarray, min_distance: float) -> np.ndarray:
    """Which candidates lie at least `min_distance` from every pick."""
    far = np.ones(len(candidates), dtype=bool)
    if not len(picks) or min_distance == 0:
        return far
    step = max(1, _DISTANCES_AT_ONCE // len(picks))
    for start in range(0, len(candidates), step):
        part = candidates[start : start + step, None, :] - picks[None, :, :]
        far[start : start + step] = (part**2).sum(axis=-1).min(axis=1) >= min_distance**2
    return far


def class_weights(labels: Any, count: int | None = None) -> np.ndarray:
    """A weight for each class, inverse to its share of the rows, for a loss to weigh its rows by.

    The weight of class c is n / (classes * n_c), n rows in all, as
    scikit-learn's "balanced" has it: rows weighed so each class counts as
    much. A class with no rows weighs 0.

    Args:
        labels: The label of each row, integers from 0.
        count: How many classes there are. Defaults to the largest label and one.
    """
    labels = integer_array(np.asarray(labels).reshape(-1), "labels are integers")
    counts = np.bincount(labels, minlength=count or 0).astype(np.float64)
    weights = np.zeros_like(counts)
    present = counts > 0
    weights[present] = len(labels) / (len(counts) * counts[present])
    return weights


def split_by_tomogram(tomograms: Any, fractions: Sequence[float], seed: int) -> list[np.ndarray]:
    """Split rows by their tomogram, so that no tomogram has rows in two parts.

    The tomograms, in the order of their names, are shuffled by `seed` and
    dealt into parts of as many tomograms as `fractions` (scaled to sum to
    1) say, rounding by largest remainder; each part of a positive fraction
    has a tomogram at least.

    Args:
        tomograms: The tomogram of each row.
        fractions: The share of the tomograms of each part, such as (0.8, 0.1, 0.1).
        seed: What decides which tomograms go where.

    Returns:
        The rows of each part, in their order.

    Raises:
        ValueError: If a fraction is negative or none positive, or there are fewer tomograms than
            positive fractions.
    """
    names = np.asarray(tomograms, dtype=object).reshape(-1)
    shares = np.asarray(fractions, dtype=np.float64).reshape(-1)
    if not len(shares) or (shares < 0).any() or not np.isfinite(shares).all() or shares.sum() <= 0:
        raise ValueError(f"fractions are numbers of 0 or more, one positive at least, not {fractions!r}")
    distinct = sorted(set(names.tolist()))
    wanted = int((shares > 0).sum())
    if len(distinct) < wanted:
        raise ValueError(f"{len(distinct)} tomograms cannot be split into {wanted} parts")
    counts = _largest_remainder(shares, len(distinct))
    for part in np.flatnonzero((shares > 0) & (counts == 0)):
        counts[np.argmax(counts)] -= 1
        counts[part] = 1
    order = np.random.default_rng(operator.index(seed) & _SEED_MASK).permutation(len(distinct))
    ends = np.cumsum(counts)
    parts = []
    for start, end in zip(ends - counts, ends):
        chosen = {distinct[i] for i in order[start:end].tolist()}
        parts.append(np.flatnonzero([name in chosen for name in names.tolist()]).astype(np.int64))
    return parts


def _largest_remainder(shares: np.ndarray, total: int) -> np.ndarray:
    """Whole counts summing to `total` in proportion to `shares`, the remainders going to the largest."""
    exact = shares / shares.sum() * total
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(-(exact - counts), kind="stable")[: total - counts.sum()]] += 1
    return counts


class BalancedBatchSampler:
    """Draws batches of rows in which the classes come in the shares asked for: equal by default.

    Each epoch draws `samples` rows: class c takes its share of them (equal
    shares, or in proportion to `weights`, rounded by largest remainder, so
    the counts of equal classes differ by one at most), its rows drawn in an
    order of the epoch's own, each once before any twice. Those rows are
    then shuffled and batched by a `BatchSampler`, which deals them out in
    shards as it does: so a `DataLoader` given it as batch_sampler shuffles,
    shards, resumes from `state_dict` and is told `set_epoch` as with its
    own. The seed and the epoch decide everything an epoch draws.

    Args:
        labels: The label of each row of the dataset, integers from 0.
        batch_size: How many rows a batch has (of one shard, with shards).
        weights: The share of each class, in proportion; a class of weight 0 is not drawn.
            Defaults to equal shares for every class that has rows.
        samples: How many rows an epoch draws in all. Defaults to the number of rows.
        drop_last: Whether to leave out the last batch when it has fewer rows.
        seed: What decides the draws. Defaults to a seed of the sampler's own.
        shard: Which shard to draw, and of how many.

    Raises:
        ValueError: If a class of positive weight has no rows, no class is to be drawn, or as
            `BatchSampler` raises.
    """

    def __init__(
        self,
        labels: Any,
        batch_size: int,
        weights: Sequence[float] | None = None,
        samples: int | None = None,
        drop_last: bool = False,
        seed: int | None = None,
        shard: tuple[int, int] = (0, 1),
    ):
        self._labels = integer_array(np.asarray(labels).reshape(-1), "labels are integers")
        present = np.bincount(self._labels, minlength=0 if weights is None else len(weights))
        shares = (present > 0).astype(np.float64) if weights is None else np.asarray(weights, np.float64)
        if shares.shape != present.shape or (shares < 0).any() or not shares.sum() > 0:
            raise ValueError(
                f"weights are a number of 0 or more for each of the {len(present)} classes, "
                f"one positive at least, not {weights!r}"
            )
        empty = np.flatnonzero((shares > 0) & (present == 0))
        if len(empty):
            raise ValueError(f"classes {empty.tolist()} have a weight but no rows")
        samples = len(self._labels) if samples is None else operator.index(samples)
        self._counts = _largest_remainder(shares, samples)
        self._pools = [np.flatnonzero(self._labels == c) for c in range(len(present))]
        self._positions = BatchSampler(samples, batch_size, True, drop_last, seed, shard)

    @property
    def batch_size(self) -> int:
        """How many rows a batch has."""
        return self._positions.batch_size

    @property
    def counts(self) -> np.ndarray:
        """How many rows of each class an epoch draws (in all shards together)."""
        return self._counts.copy()

    @property
    def epoch(self) -> int:
        """The epoch the next iteration draws."""
        return self._positions.epoch

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration draws, as `BatchSampler.set_epoch`."""
        self._positions.set_epoch(epoch)

    def rows(self, epoch: int) -> np.ndarray:
        """The rows an epoch draws, class by class, before they are shuffled and dealt into shards."""
        seed = self._positions.state_dict()["seed"]
        rng = np.random.default_rng([seed, operator.index(epoch), 1])  # not the stream of the shuffle
        drawn = [np.zeros(0, np.int64)]
        for pool, count in zip(self._pools, self._counts.tolist()):
            if count:
                rounds = -(-count // len(pool))
                drawn.append(np.concatenate([rng.permutation(pool) for _ in range(rounds)])[:count])
        return np.concatenate(drawn)

    def order(self, epoch: int) -> np.ndarray:
        """The rows of the shard in the order an epoch draws them."""
        return self.rows(epoch)[self._positions.order(epoch)]

    def __len__(self) -> int:
        """How many batches an epoch has."""
        return len(self._positions)

    def __iter__(self) -> Iterator[np.ndarray]:
        """Draw the batches of the next epoch, and count it drawn."""
        rows = self.rows(self._positions.epoch)
        return (rows[positions] for positions in self._positions)

    def state_dict(self) -> dict[str, Any]:
        """Where the sampler has got to, as `BatchSampler.state_dict` says, with the counts of the classes."""
        return {**self._positions.state_dict(), "counts": self._counts.tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from a state of `state_dict`, as `BatchSampler.load_state_dict` does.

        Raises:
            ValueError: If the state is not of a sampler of the same counts, or as
                `BatchSampler.load_state_dict` raises.
        """
        check_state(state, {"counts": self._counts.tolist()}, "balanced sampler")
        self._positions.load_state_dict({key: value for key, value in state.items() if key != "counts"})

    def __repr__(self) -> str:
        return (
            f"BalancedBatchSampler(counts={self._counts.tolist()}, batch_size={self.batch_size}, "
            f"epoch={self.epoch})"
        )
