"""The checks of a `DataLoader`'s arguments that do not depend on where its batches go."""

from __future__ import annotations

import operator
from typing import Any

from ._dataset import Dataset

__all__ = ["check_arguments"]

_OUTPUTS = ("numpy", "torch", "jax")


def check_arguments(
    dataset: Dataset,
    batch_sampler: Any,
    batch_size: int,
    shuffle: bool,
    drop_last: bool,
    seed: Any,
    pad_last: bool,
    valid: str,
    prefetch: int,
    output: Any,
) -> None:
    """Refuse a batch sampler given with what it replaces, drop_last with pad_last, an output that is
    neither named nor callable, a prefetch that is not positive, and a `valid` field the dataset has.

    Raises:
        ValueError: As above.
    """
    if batch_sampler is not None:
        given = {
            "batch_size": batch_size != 1,
            "shuffle": shuffle,
            "drop_last": drop_last,
            "seed": seed is not None,
        }
        replaced = [name for name, is_given in given.items() if is_given]
        if replaced:
            raise ValueError(f"batch_sampler replaces {', '.join(replaced)}; give one or the other")
    if drop_last and pad_last:
        raise ValueError("give drop_last or pad_last, not both")
    if not (output in _OUTPUTS if isinstance(output, str) else callable(output)):
        raise ValueError(f"output is one of {_OUTPUTS} or a callable, not {output!r}")
    if operator.index(prefetch) < 1:
        raise ValueError(f"prefetch must be positive: {prefetch}")
    if pad_last and (valid in dataset.fields or valid == dataset.index):
        raise ValueError(f"the dataset has a field named {valid!r}, the name of the field pad_last adds")
