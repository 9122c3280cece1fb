"""`DataLoader`: goes through a dataset in batches, reading the next ones on a thread pool meanwhile.

Each iteration is an epoch, a generator that, once the batch it hands out
next is read, starts reading the ones after it until `prefetch` are under
way, so that they are read while the consumer works; the first batch of an
epoch is read alone, as soon as it can be. Every batch is read into arrays
of its own, and first tells the kernel what it will read (`ImageLoader`'s
read_ahead), so that a cold epoch keeps the disk busy. A batch whose read
failed raises when its turn comes; whatever is still under way then, or
when an iteration is abandoned, is waited for before the generator
finishes, so the loader's threads are free for the next epoch.

Once read, a batch is finished (handed out as the output says, transformed,
put in its data type) on the loader's threads too, where the batches stay in
host memory, each a `Flight`; a transform that takes `rng` is given a
generator of the batch's own, seeded by the loader's seed, the epoch and the
batch's position, so what it draws depends on neither the threads nor a
resumption. Batches are read into the memory of those the program has let
go of (`RecyclingAllocator`), unless an allocator is given.

An iteration counts the batches it hands out, which is all its state adds to
that of the batch sampler as the iteration began (with the seed and the
epoch): resuming loads the one and skips the other. It also tells an
`EpochClock` when the program asks for a batch and when it has it, and its
loader counts what the reads do, which `stats` hands out together.
"""

from __future__ import annotations

import functools
import itertools
import operator
import secrets
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._arrays import as_destination
from .._concurrency import Completion
from .._counters import ReadCounters
from .._loading import ImageLoader
from ._arguments import check_arguments
from ._dataset import Allocator, Dataset, PendingBatch, resolve_rows
from ._flights import Finisher, Flight, Progress
from ._output import check_output, hand_out, stays_on_host
from ._pytorch import Batches, pytorch_names, refuse_workers
from ._recycling import RecyclingAllocator
from ._sampler import (
    BatchSampler,
    check_state,
    restore_sampler,
    sampler_state,
    shard_of,
    state_count,
    tell_epoch,
)
from ._shared import shared_loader
from ._stats import EpochClock, LoaderStats, progress_bar
from ._transforms import cast_fields, draws

__all__ = ["DataLoader"]

_STATE_VERSION = 1
_SEED_MASK = (1 << 64) - 1


class DataLoader:
    """Goes through a dataset in batches, reading the next ones meanwhile.

    Its arguments are those of PyTorch's DataLoader where they mean the same,
    but it starts no worker process: the images are read on the thread pool
    of its loader, prefetch batches at once, straight into the arrays they
    are handed out in. Each iteration is an epoch.

    The loader is what reads: its thread pool, its open readers and, when it
    was made with one, a scratch that serves the epochs after the first.
    Loaders that are given one loader share its thread pool.

    A batch is a dict with an array for each field of the dataset, the first
    axis of each running along the rows of the batch. It is handed out as
    numpy arrays, as tensors of PyTorch or as arrays of JAX. A field that does
    not hold numbers stays a numpy array.

    JAX compiles a function again for every shape it is given, so a last
    batch with fewer rows costs a compilation. drop_last leaves it out, and
    pad_last fills it up with rows of its own and says which rows are real in
    a field of booleans.

    Every batch is read into arrays of its own, which PyTorch and JAX may use
    without a copy, so a batch that has been handed out is never written again.
    Those arrays are made in the memory of a batch the program has let go of
    (every array, view and tensor sharing it dropped), whose pages are in
    place already: a `RecyclingAllocator` of the loader's own, unless
    allocator says otherwise.

    The transform runs on the loader's threads, with the hand-out as output
    says and data_type: each batch once it is read, while the program works
    on those before it, among the prefetch batches under way (numpy, PyTorch
    and their FFTs let go of the GIL). A transform that takes a keyword
    argument rng is given a numpy Generator of each batch's own, seeded by
    seed, the epoch and the batch's position in it (and the shard of a
    sharded sampler): it draws the same values on any number of threads, and
    a resumed epoch those the interrupted one would have.

    A read that fails raises when the batch it belongs to is handed out: the
    reader's own error, its class, errno, filename and key kept, with a note
    naming the row; the batches under way are waited for, and
    the next iteration starts a fresh epoch. Pinned memory asked for where
    CUDA is not available warns and reads into ordinary memory, as PyTorch does.

    A run stopped in the middle of an epoch resumes where it was, as with
    PyTorch's StatefulDataLoader: state_dict, asked for between batches, says
    how far the latest iteration got, and a loader made with the same dataset
    and arguments and given it with load_state_dict goes on from the first
    batch not handed out, then through the epochs after it. Batches read ahead
    but not handed out are read again. The state holds that of the batch
    sampler, if it has state_dict and load_state_dict, as BatchSampler does.
    A batch sampler without them is resumed by skipping the batches handed
    out of its next iteration, which must then draw the batches of the
    interrupted epoch again, as a DistributedSampler given its seed and
    set_epoch does.

    Args:
        dataset: What to go through.
        batch_size: How many rows a batch has.
        shuffle: Whether to draw the rows in an order of each epoch's own.
        batch_sampler: What draws the rows of each batch, instead of a
            BatchSampler made of batch_size, shuffle, drop_last and seed. Any
            iterable of sequences of rows, such as a BatchSampler of PyTorch
            over its DistributedSampler.
        loader: Where reads of files are dispatched, such as
            vio.loader(workers=8, scratch=scratch). Defaults to the loader shared by the process.
        drop_last: Whether to leave out the last batch when it has fewer rows.
        pad_last: Whether to fill the last batch up to batch_size rows by
            repeating its own, and give every batch a field of booleans, valid,
            false for the rows that repeat. With a batch_sampler, batches are
            filled up to its batch_size, or, if it has none, to the size of
            the first batch of the epoch.
        seed: What decides the orders of the epochs. Defaults to a seed of the loader's own.
        prefetch: How many batches to have under way at once.
        output: What to hand the batches out as: 'numpy', 'torch', 'jax', or a
            callable given each batch as numpy arrays.
        device: Where to copy the batches to: a device of PyTorch for 'torch',
            or of JAX for 'jax'. Defaults to leaving them in host memory for
            PyTorch, and to the default device of JAX.
        sharding: How JAX lays each field out across its devices, for 'jax'
            only. A sharding over the devices of several processes makes each
            batch the share of this process.
        pin_memory: Whether to read into pinned memory, for 'torch' only.
            Defaults to doing so when device is a GPU of CUDA.
        allocator: What makes the arrays of a batch, as Dataset.read_async
            takes it. Defaults to a `RecyclingAllocator` of the loader's own,
            which reads batches into the memory of those the program has let go of;
            numpy.empty makes new memory for every batch.
        transform: What to do with each batch once it is handed out as output
            says, such as normalizing it on the GPU. It may take a keyword
            argument rng, then given a numpy Generator of the batch's own.
        valid: The name of the field pad_last adds.
        data_type: The type the fields read from files are handed out in,
            after transform: 'float16', 'bfloat16' or 'float32', from any
            stored type. Defaults to the type each source reads.
        sampler: What draws the rows one at a time, as PyTorch's samplers do
            (a DistributedSampler, say): batched by batch_size, drop_last
            leaving out a short last batch. Not with batch_sampler, shuffle or seed.
        generator: What the seed is drawn from, a numpy Generator or a
            torch.Generator, as PyTorch draws its base seed. Not with seed.
        collate_fn: What to do with each batch, a dict of arrays, as it is
            handed out: transform under PyTorch's name. Not with transform.
        prefetch_factor: prefetch under PyTorch's name.
        persistent_workers: Taken for PyTorch's sake: the loader's threads
            last from one epoch to the next anyway.
        progress: Whether to show a bar of each epoch's batches on standard
            error, with the images read a second and the share of the time
            the program waited for data: tqdm's where it is installed, else
            a line of text.
        count_reads: Whether the reads count what they do for `stats`
            (images, files, rates); the time waited for data is counted anyway.
        transform_threads: Whether transform, the hand-out as output says and
            data_type run on the loader's threads. Defaults to doing so where
            the batches stay in host memory (numpy, a callable, 'torch' on
            the processor, 'jax' on CPU devices), and to the thread that
            iterates where they are copied to a GPU, whose stream they then
            follow. False runs them on the thread that iterates, a batch
            after another: for a transform that is not thread-safe.

    Other arguments of PyTorch's DataLoader have no place here, and raise a
    TypeError that says what to do instead: num_workers (other than 0) and
    worker_init_fn, since reads run on the threads of loader=vio.loader(workers=N);
    timeout; multiprocessing_context; pin_memory_device; in_order.

    Raises:
        ValueError: If a batch sampler is given with any of what it replaces,
            drop_last with pad_last, output is none of the above, or what is
            given does not apply to it: device for 'numpy' or a callable,
            sharding but for 'jax' or with device, pin_memory but for 'torch'
            or with allocator, valid named as a field of the dataset; also if
            batch_size or prefetch is not positive, or one of PyTorch's names
            is given with the argument it stands for.
        TypeError: If an argument of PyTorch's has no place here, saying what to do instead.
        ModuleNotFoundError: If output is 'torch' or 'jax' and it is not
            installed, naming the extra that installs it.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        *,
        batch_sampler: Iterable[Sequence[int]] | None = None,
        loader: ImageLoader | None = None,
        drop_last: bool = False,
        pad_last: bool = False,
        seed: int | None = None,
        prefetch: int = 4,
        output: str | Callable[[dict[str, np.ndarray]], Any] = "numpy",
        device: Any = None,
        sharding: Any = None,
        pin_memory: bool | None = None,
        allocator: Allocator | None = None,
        transform: Callable[[Any], Any] | None = None,
        valid: str = "valid",
        data_type: str | None = None,
        sampler: Iterable[int] | None = None,
        generator: Any = None,
        collate_fn: Callable[[Any], Any] | None = None,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        progress: bool = False,
        count_reads: bool = True,
        transform_threads: bool | None = None,
        **pytorch: Any,
    ):
        refuse_workers(pytorch)
        seed, transform, prefetch = pytorch_names(
            sampler, batch_sampler, shuffle, seed, generator, transform, collate_fn, prefetch, prefetch_factor
        )
        check_arguments(
            dataset, batch_sampler, batch_size, shuffle, drop_last, seed, pad_last, valid, prefetch, output
        )
        named = output if isinstance(output, str) else None
        check_output(named, device, sharding, pin_memory, allocator)
        self._dataset = dataset
        if sampler is not None:
            self._batch_sampler: Iterable[Sequence[int]] = Batches(sampler, batch_size, drop_last)
        elif batch_sampler is not None:
            self._batch_sampler = batch_sampler
        else:
            self._batch_sampler = BatchSampler(len(dataset), batch_size, shuffle, drop_last, seed)
        self._pad_to = getattr(self._batch_sampler, "batch_size", None) if pad_last else None
        self._pad_last = bool(pad_last)
        self._valid = valid
        self._loader = loader
        self._prefetch = int(prefetch)
        self._allocator = allocator
        self._transform = transform
        self._draws = draws(transform)
        self._cast = cast_fields(dataset, data_type, named)
        self._seed_given = seed is not None
        self._seed = secrets.randbits(64) if seed is None else operator.index(seed) & _SEED_MASK
        self._epoch_number = 0
        self._shard = shard_of(self._batch_sampler)
        self._resume = 0
        self._progress: Progress | None = None
        self._show_progress = bool(progress)
        self._counters = ReadCounters(enabled=count_reads)
        self._clock = EpochClock()
        self._hand_out, pinned = hand_out(output, device, sharding, pin_memory)
        if pinned is not None:
            self._allocator = pinned
        if self._allocator is None:  # each array of the batches under way, handed out and held by the loop
            arrays = len(dataset.fields) + (dataset.index is not None) + self._pad_last
            self._allocator = RecyclingAllocator(keep=(self._prefetch + 2) * arrays)
        if transform_threads is None:
            transform_threads = stays_on_host(output, device, sharding)
        work = transform is not None or data_type is not None or named is None
        self._transform_threads = bool(transform_threads) and work
        self._arrays_counted = (0, 0)

    @property
    def dataset(self) -> Dataset:
        """What it goes through."""
        return self._dataset

    @property
    def batch_sampler(self) -> Iterable[Sequence[int]]:
        """What draws the rows of each batch."""
        return self._batch_sampler

    @property
    def stats(self) -> LoaderStats:
        """What the epoch so far did: the time the program waited for data and the time it worked
        between batches, and what the reads did (images and bytes, the scratch's and open readers'
        share, files opened, rates by format and the slowest files, conversions, patches), and the
        arrays of batches read into recycled memory or new.

        It counts from the start of the latest iteration, `set_epoch` or `reset_stats`, whichever came
        last, up to now; `as_dict()` gives the figures to a logger.
        """
        recycled, made = (now - then for now, then in zip(self._arrays(), self._arrays_counted))
        return self._clock.figures(self._counters.stats(), recycled, made)

    def reset_stats(self) -> None:
        """Count `stats` from zero, from now."""
        self._clock.reset()
        self._counters.reset()
        self._arrays_counted = self._arrays()

    def _arrays(self) -> tuple[int, int]:
        """The arrays the allocator, if a `RecyclingAllocator`, has made so far in recycled memory and new."""
        allocator = self._allocator
        if isinstance(allocator, RecyclingAllocator):
            return allocator.recycled, allocator.made
        return 0, 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration goes through, as PyTorch's samplers are told.

        It is passed on to the batch sampler and, for a BatchSampler of
        PyTorch, to the sampler it batches (a DistributedSampler, say), or
        to the sampler given as sampler; the transform's generators are of
        that epoch. `stats` count from zero again.

        Raises:
            ValueError: If the epoch is negative.
            TypeError: If neither has set_epoch.
        """
        epoch = operator.index(epoch)
        if epoch < 0:
            raise ValueError(f"an epoch cannot be negative: {epoch}")
        tell_epoch(self._batch_sampler, epoch)
        self._epoch_number = epoch
        self.reset_stats()

    def __len__(self) -> int:
        """How many batches an epoch has, as the batch sampler says."""
        return len(self._batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        """Go through one epoch."""
        return self._epoch()

    def state_dict(self) -> dict[str, Any]:
        """Get how far the latest iteration got, to resume from with load_state_dict.

        It may be asked for at any time, between batches too. Once an
        iteration has been gone through to its end, the state is that of the
        next epoch's start.

        Returns:
            Plain values, which pickle and JSON take: version; size, the rows
            of the dataset; sampler, the state of the batch sampler as the
            iteration began, or None if it has no state_dict; batches,
            how many batches of the iteration were handed out; and seed and
            epoch, what the transform's generators are seeded by.
        """
        if self._progress is not None:
            progress = self._progress
            sampler, epoch, batches = progress.sampler, progress.epoch, progress.batches
        else:
            sampler, epoch, batches = sampler_state(self._batch_sampler), self._epoch_number, self._resume
        return {
            "version": _STATE_VERSION,
            "size": len(self._dataset),
            "sampler": sampler,
            "batches": batches,
            "seed": self._seed,
            "epoch": epoch,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from a state of state_dict: the next iteration hands out the rest of its epoch.

        The seed is taken from the state, unless the loader was given one; a
        state saved before states held the seed and the epoch leaves them as they are.

        Args:
            state: A state of a loader made with the same dataset and arguments.

        Raises:
            ValueError: If the state is not of such a loader, saying what
                differs: its version, size or a seed given, whether its batch
                sampler has a state or what that state holds, or batches past an epoch.
        """
        expected = {"version": _STATE_VERSION, "size": len(self._dataset)}
        if self._seed_given and isinstance(state, Mapping) and "seed" in state:
            expected["seed"] = self._seed
        check_state(state, expected, "DataLoader")
        most = len(self._batch_sampler) if hasattr(self._batch_sampler, "__len__") else None
        batches = state_count(state, "batches", most)
        seed = state_count(state, "seed", _SEED_MASK) if "seed" in state else self._seed
        epoch = state_count(state, "epoch") if "epoch" in state else self._epoch_number
        restore_sampler(self._batch_sampler, state.get("sampler"))
        self._resume, self._progress, self._seed, self._epoch_number = batches, None, seed, epoch

    def _epoch(self) -> Iterator[Any]:
        given = self._loader or shared_loader()
        loader = ImageLoader(given.executor, given.readers, read_ahead=True, counters=self._counters)
        self.reset_stats()
        clock = self._clock
        clock.ask()
        skip, self._resume = self._resume, 0
        epoch, self._epoch_number = self._epoch_number, self._epoch_number + 1
        samples = iter(self._batch_sampler)
        progress = self._progress = Progress(sampler_state(self._batch_sampler), epoch, skip)
        flights: deque[Flight] = deque()
        finish = functools.partial(self._finish, epoch)
        finisher: Finisher | None = None
        pad_to = self._pad_to
        position = skip

        def size_up(rows: Any) -> None:
            nonlocal pad_to
            if self._pad_last and pad_to is None:
                pad_to = len(resolve_rows(rows, len(self._dataset)))

        def start_next() -> bool:
            nonlocal position
            rows = next(samples, None)
            if rows is None:
                return False
            size_up(rows)
            reads, extra, count = self._start(rows, loader, pad_to)
            flight = Flight(reads, extra, position, count)
            flights.append(flight)
            if finisher is not None:
                finisher.add(flight)
            position += 1
            return True

        for rows in itertools.islice(samples, skip):
            size_up(rows)
        bar = None
        if self._show_progress:
            bar = progress_bar(len(self) - skip if hasattr(self._batch_sampler, "__len__") else None)
        try:
            if self._transform_threads:
                finisher = Finisher(given.executor, finish)
            start_next()
            while flights:
                flight = flights.popleft()
                if finisher is not None:  # finished on the loader's threads, or here if not yet submitted
                    handed, values = flight.result(finish), None
                else:  # finished here, in the program's time, after the next batches are started
                    handed, values = None, flight.read()
                rows, at = flight.rows, flight.position
                del flight  # its arrays, read into, go back to the allocator once the program drops them
                while len(flights) < self._prefetch and start_next():
                    pass
                clock.ready(rows)
                if values is not None:
                    handed, values = finish(values, at), None
                progress.batches += 1
                if bar is not None:
                    bar.show(self.stats)
                yield handed
                del handed
                clock.ask()
            if self._progress is progress:
                self._progress = None
        finally:
            for flight in flights:
                flight.abandon()
            if finisher is not None:
                finisher.close()
            if bar is not None:
                bar.close(self.stats)

    def _start(
        self, rows: Any, loader: ImageLoader, pad_to: int | None
    ) -> tuple[PendingBatch, dict[str, np.ndarray], int]:
        """The batch of `rows` under way, the fields the loader adds, and how many rows it has."""
        try:
            extra = {}
            rows = resolve_rows(rows, len(self._dataset))
            if self._pad_last:
                size = max(pad_to, len(rows))
                valid = as_destination(self._allocator((size,), np.dtype(np.bool_)))
                valid[...] = np.arange(size) < len(rows)
                rows = np.resize(rows, size)
                extra[self._valid] = valid
            return self._dataset.read_async(rows, self._allocator, loader), extra, len(rows)
        except Exception as error:
            return PendingBatch({}, [Completion.failed(error)]), {}, 0

    def _finish(self, epoch: int, values: dict[str, np.ndarray], position: int) -> Any:
        """The batch handed out as output says, transformed and put in its data type."""
        handed = self._hand_out(values) if self._hand_out is not None else values
        if self._draws:
            rng = np.random.default_rng([self._seed, self._shard, epoch, position])
            handed = self._transform(handed, rng=rng)
        elif self._transform is not None:
            handed = self._transform(handed)
        return self._cast(handed)

    def __repr__(self) -> str:
        return f"<DataLoader over {self._dataset!r}, {len(self)} batches an epoch>"
