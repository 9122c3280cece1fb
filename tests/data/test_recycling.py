"""RecyclingAllocator: a batch's memory goes to a later batch only once nothing refers to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitrio.data import ArraySource, DataLoader, Dataset, ImageSource, RecyclingAllocator


def address(array) -> int:
    return array.__array_interface__["data"][0] if isinstance(array, np.ndarray) else array.data_ptr()


def test_a_dropped_array_s_memory_goes_to_the_next_array_of_its_size():
    allocate = RecyclingAllocator()
    first = allocate((4, 5), np.float32)
    where = address(first)
    assert first.shape == (4, 5) and first.dtype == np.float32 and first.flags.c_contiguous
    second = allocate((4, 5), np.float32)
    assert address(second) != where
    del first
    again = allocate((20,), np.int32)  # the same bytes, another shape and type
    assert address(again) == where and again.shape == (20,) and again.dtype == np.int32
    assert address(allocate((3, 5), np.float32)) not in (where, address(second))  # another size


@pytest.mark.parametrize(
    "holder",
    [
        lambda array: array[1:],
        lambda array: array.T,
        lambda array: array.view(np.uint8),
        lambda array: memoryview(array),
        lambda array: torch.from_numpy(array),
        lambda array: torch.from_numpy(array)[2],
        lambda array: np.frombuffer(array, np.float32),
    ],
    ids=["slice", "transpose", "view", "memoryview", "tensor", "tensor row", "frombuffer"],
)
def test_memory_anything_still_refers_to_is_not_reused(holder):
    allocate = RecyclingAllocator()
    array = allocate((4, 5), np.float32)
    array.view(np.uint8)[...] = 0x55
    kept = holder(array)
    where = address(array)
    del array
    others = [allocate((4, 5), np.float32) for _ in range(3)]
    assert where not in [address(other) for other in others]
    for other in others:
        other[...] = 0
    assert set(np.asarray(kept).tobytes()) == {0x55}  # not written over
    del kept, others
    assert address(allocate((4, 5), np.float32)) == where


def test_it_keeps_at_most_keep_buffers_of_a_size():
    allocate = RecyclingAllocator(keep=2)
    held = [allocate((100,), np.uint8) for _ in range(4)]
    kept = {address(array) for array in held[:2]}
    del held
    assert {address(allocate((100,), np.uint8)) for _ in range(1)} <= kept
    assert "buffers=2" in repr(allocate)
    with pytest.raises(ValueError, match="keep is 1 or more"):
        RecyclingAllocator(keep=0)


@pytest.mark.parametrize("output", ["numpy", "torch"])
def test_batches_kept_by_the_program_keep_their_values(stacks, loader, output):
    rows = len(stacks.images)
    dataset = Dataset({"image": ImageSource(stacks.locations), "row": ArraySource(np.arange(rows))})
    batches = DataLoader(
        dataset, 4, shuffle=True, seed=1, loader=loader, output=output, allocator=RecyclingAllocator(keep=3)
    )
    kept = list(batches)  # every batch held: none may share memory with a later one
    for batch in kept:
        rows_read = np.asarray(batch["row"])
        np.testing.assert_array_equal(np.asarray(batch["image"]), stacks.images[rows_read])
    assert len({address(batch["image"]) for batch in kept}) == len(kept)


def test_batches_dropped_by_the_program_are_read_into_a_few_buffers(stacks, loader):
    rows = len(stacks.images)
    dataset = Dataset({"image": ImageSource(stacks.locations), "row": ArraySource(np.arange(rows))})
    prefetch = 2
    batches = DataLoader(
        dataset, 2, shuffle=True, seed=3, loader=loader, prefetch=prefetch, allocator=RecyclingAllocator()
    )
    seen, count = set(), 0
    for _ in range(3):
        for batch in batches:
            np.testing.assert_array_equal(batch["image"], stacks.images[batch["row"]])
            seen.add(address(batch["image"]))
            count += 1
            del batch
    assert count == 33 and len(seen) <= prefetch + 3  # under way, handed out, held by the loop


def kept_by(holder: str, batch):
    """What a program keeps of a batch, as `holder` names it."""
    image = batch["image"]
    if holder == "view":
        return image[1:, 2:]
    if holder == "from_numpy":
        return torch.from_numpy(image)
    if holder == "tensor view":
        return image[0]
    return image


@pytest.mark.parametrize(
    "output,holder",
    [
        ("numpy", "batch"),
        ("numpy", "view"),
        ("numpy", "from_numpy"),
        ("torch", "batch"),
        ("torch", "tensor view"),
        ("jax", "batch"),
    ],
)
def test_by_default_what_the_program_keeps_of_a_batch_is_never_written_again(stacks, loader, output, holder):
    """Every third batch is kept (its array, a view of it, a tensor sharing it); the others are dropped,
    and their memory goes to later batches, never the memory of one kept."""
    dataset = Dataset({"image": ImageSource(stacks.locations), "row": ArraySource(np.arange(21))})
    batches = DataLoader(dataset, 2, shuffle=True, seed=5, loader=loader, output=output, prefetch=2)
    kept = []
    for _ in range(3):
        for number, batch in enumerate(batches):
            if number % 3 == 0:
                kept.append((np.asarray(batch["row"]).copy(), kept_by(holder, batch)))
            del batch
    assert batches.stats.recycled_arrays > 0
    for rows, held in kept:
        expected = stacks.images[rows]
        if holder == "view":
            expected = expected[1:, 2:]
        elif holder == "tensor view":
            expected = expected[0]
        np.testing.assert_array_equal(np.asarray(held), expected)


def test_by_default_batches_let_go_of_are_read_into_memory_already_made(stacks, loader):
    dataset = Dataset({"image": ImageSource(stacks.locations), "row": ArraySource(np.arange(21))})
    batches = DataLoader(dataset, 3, shuffle=True, seed=2, loader=loader, prefetch=2)
    for batch in batches:
        np.testing.assert_array_equal(batch["image"], stacks.images[batch["row"]])
    first = batches.stats
    for batch in batches:
        np.testing.assert_array_equal(batch["image"], stacks.images[batch["row"]])
    second = batches.stats
    # 3 arrays a batch (image, row, index), 7 batches; the first epoch makes at most the 4 buffers of
    # each kept (2 batches under way, the one handed out, the one the loop holds), the second none
    assert first.new_arrays <= 3 * 4 and first.recycled_arrays == 3 * 7 - first.new_arrays
    assert (second.new_arrays, second.recycled_arrays) == (0, 3 * 7)
    assert second.as_dict()["recycled_arrays"] == 21


def test_a_batch_of_objects_is_made_anew(loader):
    names = np.array([f"particle {i}" for i in range(6)], dtype=object)
    batches = DataLoader(Dataset({"name": names}), 2, loader=loader)
    handed = [list(batch["name"]) for _ in range(2) for batch in batches]
    assert handed == [list(names[i : i + 2]) for i in (0, 2, 4)] * 2
