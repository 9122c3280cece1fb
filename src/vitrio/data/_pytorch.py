"""PyTorch's DataLoader's arguments, as `DataLoader` maps them: workers refused, saying the way here;
a seed drawn from a generator; a sampler's rows batched; collate_fn and prefetch_factor taken as the
transform and prefetch they are."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

__all__ = ["Batches", "pytorch_names", "refuse_workers", "seed_of"]

# What PyTorch's DataLoader takes that has no place here, and what to do instead.
_WORKER_ARGUMENTS = {
    "num_workers": "reads run on threads: pass loader=vio.loader(workers=N)",
    "worker_init_fn": "no worker process starts: set up before iterating; pass loader=vio.loader(workers=N)",
    "multiprocessing_context": "no worker process starts: reads run on threads: loader=vio.loader(workers=N)",
    "timeout": "a batch has no time limit; a read that fails raises, naming the file",
    "pin_memory_device": "pin_memory pins for the device given as device=",
    "in_order": "batches are always handed out in order",
}


def refuse_workers(given: Mapping[str, Any]) -> None:
    """Refuse arguments of PyTorch's DataLoader that do not map, saying the way here; num_workers=0 maps."""
    for name, value in given.items():
        if name == "num_workers" and value == 0:
            continue
        if name not in _WORKER_ARGUMENTS:
            raise TypeError(f"DataLoader() got an unexpected keyword argument {name!r}")
        raise TypeError(f"DataLoader takes no {name}: {_WORKER_ARGUMENTS[name]}")


def pytorch_names(
    sampler: Any,
    batch_sampler: Any,
    shuffle: bool,
    seed: int | None,
    generator: Any,
    transform: Any,
    collate_fn: Any,
    prefetch: int,
    prefetch_factor: int | None,
) -> tuple[int | None, Any, int]:
    """The seed, transform and prefetch that PyTorch's names (`generator`, `collate_fn`,
    `prefetch_factor`) stand for, each refused beside what it stands for.

    Raises:
        ValueError: If a name of PyTorch's is given with the argument it stands for, or a sampler with
            what it replaces.
    """
    if sampler is not None and (batch_sampler is not None or shuffle or seed is not None):
        raise ValueError("sampler draws the rows; give it without batch_sampler, shuffle or seed")
    if generator is not None:
        if seed is not None or sampler is not None:
            raise ValueError("generator is drawn the seed from; give it without seed or sampler")
        seed = seed_of(generator)
    if collate_fn is not None:
        if transform is not None:
            raise ValueError("collate_fn is a transform of each batch; give it or transform, not both")
        transform = collate_fn
    if prefetch_factor is not None:
        if prefetch != 4:
            raise ValueError("prefetch_factor is prefetch; give one or the other")
        prefetch = prefetch_factor
    return seed, transform, prefetch


def seed_of(generator: Any) -> int:
    """A seed drawn from a numpy Generator or a torch.Generator, as PyTorch draws its base seed from one."""
    if isinstance(generator, np.random.Generator):
        return int(generator.integers(1 << 63))
    if callable(getattr(generator, "initial_seed", None)):
        import torch

        return int(torch.empty((), dtype=torch.int64).random_(generator=generator))
    raise TypeError(f"generator is a numpy Generator or a torch.Generator, not {type(generator).__name__}")


class Batches:
    """The rows a sampler draws one at a time, in batches, as PyTorch's BatchSampler makes them."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool):
        if operator.index(batch_size) < 1:
            raise ValueError(f"the batch size must be positive: {batch_size}")
        self.sampler, self.batch_size, self._drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        rows = iter(self.sampler)
        while batch := list(itertools.islice(rows, self.batch_size)):
            if len(batch) == self.batch_size or not self._drop_last:
                yield batch

    def __len__(self) -> int:
        count = len(self.sampler)  # type: ignore[arg-type]
        return count // self.batch_size if self._drop_last else -(-count // self.batch_size)

    def __repr__(self) -> str:
        return f"<batches of {self.batch_size} of {self.sampler!r}>"
