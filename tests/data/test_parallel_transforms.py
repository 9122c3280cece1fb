"""DataLoader's transform on the loader's threads: the next batches' while the program holds one, each
batch with a generator of its own, the same values whatever the threads and after a resumption."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import vitrio as vio
from vitrio.data import (
    ArraySource,
    Compose,
    DataLoader,
    Dataset,
    ImageSource,
    Normalize,
    PreparedSource,
    Transform,
)

# Generous: the machine may be loaded, and the wait ends as soon as the transform has run.
WAIT = 60


def rows_dataset(rows: int = 40) -> Dataset:
    return Dataset({"x": np.arange(rows, dtype=np.float64)})


def test_the_next_batches_are_transformed_on_the_loader_s_threads_while_the_program_holds_one():
    transformed: dict[int, threading.Event] = {first: threading.Event() for first in range(0, 40, 4)}
    threads: dict[int, str] = {}

    def record(batch):
        first = int(batch["index"][0])
        threads[first] = threading.current_thread().name
        transformed[first].set()
        return batch

    batches = DataLoader(rows_dataset(), 4, prefetch=3, loader=vio.loader(workers=2), transform=record)
    iterator = iter(batches)
    held = next(iterator)
    # the program holds batch 0 and asks for nothing: batches 1 and 2 are transformed meanwhile
    assert transformed[4].wait(WAIT) and transformed[8].wait(WAIT)
    assert threads[4] != threading.current_thread().name and threads[8] != threading.current_thread().name
    np.testing.assert_array_equal(held["x"], [0, 1, 2, 3])
    assert [int(batch["x"][0]) for batch in iterator] == list(range(4, 40, 4))


def test_transform_threads_false_runs_the_transform_on_the_thread_that_iterates():
    names = set()
    batches = DataLoader(
        rows_dataset(),
        4,
        loader=vio.loader(workers=2),
        transform=lambda batch: names.add(threading.current_thread().name) or batch,
        transform_threads=False,
    )
    assert len(list(batches)) == 10
    assert names == {threading.current_thread().name}


class Noise(Transform):
    """Adds Gaussian noise drawn from the generator it is given."""

    @property
    def parameters(self) -> tuple:
        return ()

    def apply(self, images, rng):
        return images + rng.standard_normal(images.shape, dtype=np.float32)


def noisy_epochs(stacks, epochs: int, **options) -> list[list[np.ndarray]]:
    dataset = Dataset({"image": ImageSource(stacks.locations)})
    batches = DataLoader(dataset, 4, seed=7, transform=Compose(Normalize(3), Noise()), **options)
    return [[batch["image"] for batch in batches] for _ in range(epochs)]


def test_a_random_transform_draws_the_same_values_whatever_the_threads(stacks):
    """Each batch's generator is seeded by the seed, the epoch and the batch's position: the same
    values on one thread, on three, or on the thread that iterates; each epoch its own."""
    one = noisy_epochs(stacks, 2, loader=vio.loader(workers=1))
    three = noisy_epochs(stacks, 2, loader=vio.loader(workers=3), prefetch=6)
    here = noisy_epochs(stacks, 2, loader=vio.loader(workers=2), transform_threads=False)
    for other in (three, here):
        for epoch, epoch_one in zip(other, one):
            for batch, batch_one in zip(epoch, epoch_one, strict=True):
                np.testing.assert_array_equal(batch, batch_one)
    # the noise differs between epochs and batches: the same images, normalised, are noised anew
    clean = Normalize(3)(stacks.images)
    noise = [[noisy - clean[4 * k : 4 * k + 4] for k, noisy in enumerate(epoch)] for epoch in one]
    assert np.abs(noise[0][0]).mean() > 0.5  # standard normal noise: mean absolute value 0.8
    assert not np.allclose(noise[0][0], noise[1][0]) and not np.allclose(noise[0][0][0], noise[0][1][0])


def test_a_plain_function_taking_rng_is_given_one_of_each_batch():
    def draw(batch, rng):
        return int(rng.integers(1 << 62))

    batches = DataLoader(rows_dataset(), 8, seed=3, loader=vio.loader(workers=2), transform=draw)
    first, second = list(batches), list(batches)
    again = list(DataLoader(rows_dataset(), 8, seed=3, loader=vio.loader(workers=1), transform=draw))
    assert len(set(first + second)) == 10  # every batch of either epoch draws its own
    assert again == first


@pytest.mark.parametrize("seed", [11, None])
def test_a_resumed_epoch_draws_what_the_interrupted_one_would_have(stacks, seed):
    def make() -> DataLoader:
        dataset = Dataset({"image": ImageSource(stacks.locations)})
        return DataLoader(
            dataset, 3, shuffle=True, seed=seed, transform=Noise(), loader=vio.loader(workers=2)
        )

    whole = make()
    whole.load_state_dict(json.loads(json.dumps(make().state_dict())))
    interrupted = make()
    list(interrupted)  # epoch 0 gone through: the interruption comes in epoch 1
    iterator = iter(interrupted)
    before = [next(iterator)["image"] for _ in range(2)]
    state = json.loads(json.dumps(interrupted.state_dict()))
    assert state["epoch"] == 1 and state["batches"] == 2
    rest = [batch["image"] for batch in iterator]
    resumed = make()
    resumed.load_state_dict(state)
    for batch, expected in zip([b["image"] for b in resumed], rest, strict=True):
        np.testing.assert_array_equal(batch, expected)
    if seed is not None:  # a loader given the seed draws the whole of epoch 1 alike
        whole.set_epoch(1)
        for batch, expected in zip([b["image"] for b in whole], before + rest, strict=True):
            np.testing.assert_array_equal(batch, expected)


def test_a_state_of_another_seed_is_refused():
    state = DataLoader(rows_dataset(), 4, seed=1).state_dict()
    with pytest.raises(ValueError, match="seed is 1 in the state but 2 here"):
        DataLoader(rows_dataset(), 4, seed=2).load_state_dict(state)


def test_a_prepared_source_read_on_one_thread_is_transformed_there_too(stacks):
    """A PreparedSource prepares its images on the loader's executor: a transform waiting for such a
    read on that executor's only thread would never start; the finishing waits elsewhere."""
    prepared = PreparedSource(ImageSource(stacks.locations), Normalize(3))
    dataset = Dataset({"image": prepared, "row": ArraySource(np.arange(len(stacks.images)))})
    batches = DataLoader(dataset, 4, loader=vio.loader(workers=1), transform=lambda batch: batch)
    images = np.concatenate([batch["image"] for batch in batches])
    np.testing.assert_allclose(images, Normalize(3)(stacks.images), rtol=1e-5, atol=1e-6)


def test_a_transform_that_draws_is_not_prepared_once(stacks):
    images = ImageSource(stacks.locations)
    for drawing in (Noise(), Compose(Normalize(3), Noise()), lambda images, rng: images):
        with pytest.raises(ValueError, match="draws random numbers"):
            PreparedSource(images, drawing)
    PreparedSource(images, Compose(Normalize(3)))  # one that draws nothing is


def test_a_state_saved_before_states_held_the_seed_still_resumes(stacks):
    dataset = Dataset({"image": ImageSource(stacks.locations)})
    interrupted = DataLoader(dataset, 4, shuffle=True, seed=5)
    iterator = iter(interrupted)
    next(iterator)
    state = {key: value for key, value in interrupted.state_dict().items() if key not in ("seed", "epoch")}
    rest = [batch["index"] for batch in iterator]
    resumed = DataLoader(dataset, 4, shuffle=True, seed=5)
    resumed.load_state_dict(state)
    assert [batch["index"].tolist() for batch in resumed] == [rows.tolist() for rows in rest]
