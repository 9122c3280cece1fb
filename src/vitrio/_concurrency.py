"""Running tasks on threads, and waiting for them: executors and `Completion`.

This layer knows nothing of files. A `Completion` is the one thing to wait
on: it counts down the tasks of one piece of work, or combines several
(`Completion.all`), and keeps the arrays they use alive as long as it lives.

At exit, work still under way is waited for before the interpreter shuts
down (an `atexit` hook, while the pool's threads still run): a program that
ends, or raises, with reads in flight exits once they are done, and no
thread writes into memory that has been freed. A completion dropped while
the interpreter is finalizing (its threads frozen) does not wait, and keeps
its arrays for good rather than free memory a frozen thread may write.
"""

from __future__ import annotations

import abc
import atexit
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["Completion", "Executor", "ThreadPoolExecutor", "SynchronousExecutor", "run_tasks", "shared_pool"]

Task = Callable[[], None]


class _Work:
    """What the tasks of one completion share: how many are left, the first failure, what to keep alive."""

    __slots__ = ("left", "error", "done", "lock", "keep")

    def __init__(self, count: int, keep: Any):
        self.left = count
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.keep = keep
        if count == 0:
            self.done.set()

    def finish_one(self, error: BaseException | None) -> None:
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.left -= 1
            last = self.left == 0
        if last:
            self.keep = None
            self.done.set()
            _under_way.discard(self)


_under_way: set[_Work] = set()
"""The work submitted to a thread pool and not yet done, waited for at exit.

A child process made by `fork` has none of its parent's threads: it forgets their work.
"""
os.register_at_fork(after_in_child=_under_way.clear)


@atexit.register
def _wait_at_exit() -> None:
    for work in list(_under_way):
        work.done.wait()


class Completion:
    """Work under way, waited on as one: wait for it, and learn whether it failed.

    The one thing to wait on. It stands for tasks on an executor
    (`run_tasks`), for several waitables at once (`Completion.all`), for a
    failure known at once (`Completion.failed`), or for another completion
    whose failure is explained (`explained`), or for work that follows
    another (`then`). It keeps the arrays the work
    reads and writes alive for as long as it lives, so that they outlast
    `get()` even when the caller dropped them; dropping a completion that is
    not ready waits for the work. Waiting never holds the GIL.
    """

    __slots__ = ("_works", "_keep", "_parts", "_explain", "__weakref__")

    def __init__(
        self,
        works: Sequence[_Work] = (),
        keep: Any = None,
        parts: Sequence[Any] = (),
        explain: Callable[[BaseException], str] | None = None,
    ):
        self._works = tuple(works)
        self._keep = keep
        self._parts = tuple(parts)
        self._explain = explain

    @classmethod
    def all(cls, waitables: Iterable[Any]) -> Completion:
        """One completion that is ready when all of `waitables` are: completions, or anything with
        `is_ready`, `wait()` and `get()`. Its `get()` raises the first failure, in their order."""
        return cls(parts=tuple(waitables))

    @classmethod
    def failed(cls, error: BaseException) -> Completion:
        """A completion ready at once, whose `get()` raises `error`: work that could not be started."""
        work = _Work(0, None)
        work.error = error
        return cls([work])

    def explained(self, explain: Callable[[BaseException], str]) -> Completion:
        """This completion, whose `get()` raises its failure itself (its class, errno and filename kept)
        with `explain(failure)` added as a note, once."""
        return Completion(parts=(self,), explain=explain)

    def then(self, function: Callable[[], None]) -> Completion:
        """This completion followed by `function`, run once this one succeeds, by the first thread to wait.

        The completion returned is ready once `function` has run; its `get()`
        raises this one's failure (and `function` never runs), or `function`'s.
        """
        return Completion(parts=(_Then(self, function),))

    @property
    def is_ready(self) -> bool:
        """Whether every task of the work is done."""
        return all(work.done.is_set() for work in self._works) and all(part.is_ready for part in self._parts)

    def wait(self) -> None:
        """Block until every task is done. Raises nothing."""
        for work in self._works:
            work.done.wait()
        for part in self._parts:
            part.wait()

    def get(self) -> None:
        """Block until every task is done, then raise the first failure, if any."""
        self.wait()
        try:
            for work in self._works:
                if work.error is not None:
                    raise work.error
            for part in self._parts:
                part.get()
        except Exception as error:
            if self._explain is not None:
                context = self._explain(error)
                if context not in getattr(error, "__notes__", ()):
                    error.add_note(context)
            raise

    @property
    def exception(self) -> BaseException | None:
        """The first failure of the work once it is done, or None."""
        try:
            self.get()
        except BaseException as error:  # noqa: BLE001 - handed back, not raised
            return error
        return None

    def __del__(self) -> None:
        if sys.is_finalizing():
            for work in getattr(self, "_works", ()):
                if not work.done.is_set():
                    _abandoned.append(work)
            return
        for work in getattr(self, "_works", ()):
            work.done.wait()

    def __repr__(self) -> str:
        return f"<Completion {'ready' if self.is_ready else 'pending'}>"


class _Then:
    """What `Completion.then` waits for: a completion, then a function run by the first to wait."""

    __slots__ = ("first", "function", "error", "done", "lock")

    def __init__(self, first: Completion, function: Callable[[], None]):
        self.first, self.function = first, function
        self.error: BaseException | None = None
        self.done = False
        self.lock = threading.Lock()

    @property
    def is_ready(self) -> bool:
        return self.done

    def wait(self) -> None:
        with self.lock:
            if self.done:
                return
            try:
                self.first.get()
                self.function()
            except Exception as error:
                self.error = error
            self.done, self.function = True, None

    def get(self) -> None:
        self.wait()
        if self.error is not None:
            raise self.error


_abandoned: list[_Work] = []
"""Work dropped while the interpreter finalizes, kept with its arrays: no thread writes freed memory."""


def _run(work: _Work, task: Task) -> None:
    try:
        task()
    except BaseException as error:  # noqa: BLE001 - handed to whoever waits
        work.finish_one(error)
    else:
        work.finish_one(None)


def run_tasks(executor: Executor, tasks: Sequence[Task], keep: Any = None) -> Completion:
    """Submit `tasks` to `executor`; the completion keeps `keep` alive, and the work until it is done."""
    work = _Work(len(tasks), keep)
    if tasks and not isinstance(executor, SynchronousExecutor):
        _under_way.add(work)
    for task in tasks:
        executor.submit(_run, work, task)
    return Completion([work], keep)


class Executor(abc.ABC):
    """Somewhere work can run: the base of `ThreadPoolExecutor` and `SynchronousExecutor`.

    Loaders, savers and `prefetch_scratch_async` take any executor, and one
    executor can serve several of them at once. A completion must not be
    waited for from inside a task that runs on the executor completing it.
    A subclass implements `submit` and `worker_count`.

    Raises:
        TypeError: When called: it is abstract.
    """

    @property
    @abc.abstractmethod
    def worker_count(self) -> int:
        """How many tasks run at once."""

    @abc.abstractmethod
    def submit(self, function: Callable[..., None], *args: Any) -> None:
        """Run `function(*args)`, now or later; it must not raise."""


class SynchronousExecutor(Executor):
    """Runs every task at once, on the thread that submits it."""

    @property
    def worker_count(self) -> int:
        """One: the submitting thread."""
        return 1

    def submit(self, function: Callable[..., None], *args: Any) -> None:
        """Run `function(*args)` now."""
        function(*args)

    def __repr__(self) -> str:
        return "SynchronousExecutor()"


_STOP = object()


def _serve(tasks: queue.SimpleQueue) -> None:
    while True:
        item = tasks.get()
        if item is _STOP:
            return
        function, args = item
        function(*args)
        del item, function, args


class ThreadPoolExecutor(Executor):
    """A pool of `worker_count` threads, started on first use and stopped when the pool is dropped.

    Safe across `fork`: a child process starts threads of its own on first use.

    Args:
        worker_count: How many threads run tasks.

    Raises:
        ValueError: If `worker_count` is not positive.
    """

    def __init__(self, worker_count: int):
        if int(worker_count) < 1:
            raise ValueError(f"worker_count must be positive: {worker_count}")
        self._count = int(worker_count)
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue | None = None
        self._pid = 0
        self._finalizer: weakref.finalize | None = None

    @property
    def worker_count(self) -> int:
        """How many threads run tasks."""
        return self._count

    def _queue(self) -> queue.SimpleQueue:
        tasks = self._tasks
        if tasks is not None and self._pid == os.getpid():
            return tasks
        with self._lock:
            if self._tasks is None or self._pid != os.getpid():
                tasks = queue.SimpleQueue()
                threads = [
                    threading.Thread(target=_serve, args=(tasks,), name=f"vitrio-{i}", daemon=True)
                    for i in range(self._count)
                ]
                for thread in threads:
                    thread.start()
                self._tasks, self._pid = tasks, os.getpid()
                self._finalizer = weakref.finalize(self, _stop, tasks, threads)
            return self._tasks

    def submit(self, function: Callable[..., None], *args: Any) -> None:
        """Run `function(*args)` on one of the threads."""
        self._queue().put((function, args))

    def shutdown(self, wait: bool = True) -> None:
        """Stop the threads once the tasks submitted so far are done; a later submit starts new ones."""
        with self._lock:
            finalizer, self._tasks = self._finalizer, None
            self._finalizer = None
        if finalizer is not None:
            tasks, threads = finalizer.detach()[2]
            _stop(tasks, threads, wait)

    def __repr__(self) -> str:
        return f"ThreadPoolExecutor({self._count})"


def _stop(tasks: queue.SimpleQueue, threads: list[threading.Thread], wait: bool = False) -> None:
    for _ in threads:
        tasks.put(_STOP)
    if wait:
        current = threading.current_thread()
        for thread in threads:
            if thread is not current:
                thread.join()


_shared: dict[tuple[str, int], ThreadPoolExecutor] = {}
_shared_lock = threading.Lock()


def shared_pool(name: str, size: int) -> ThreadPoolExecutor:
    """The pool of `size` threads the process shares for `name` (`vitrio._config.THREADS` lists them),
    made at its first use; its threads start with its first task, anew in a child after `fork`."""
    with _shared_lock:
        pool = _shared.get((name, size))
        if pool is None:
            pool = _shared[name, size] = ThreadPoolExecutor(size)
        return pool
