"""The conformance suite of providers in front of another (`WrappingImageReaderProvider`): each optional
method of `vitrio.ImageReaderProvider`, found by looking at the class, is passed on or overridden as a
change the subclass names, so that a method added later and dropped by a wrapper fails it. As
`vitrio.testing.conformance`, subclassed as `Test...` in a test module. Needs pytest.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import ClassVar

import vitrio as vio
from vitrio._providers import WrappingImageReaderProvider

__all__ = ["WrapperConformance", "optional_methods"]


def optional_methods() -> tuple[str, ...]:
    """The names of the methods of `vio.ImageReaderProvider` that have a default: all but `acquire` and
    `release`."""
    return tuple(
        name
        for name, member in vars(vio.ImageReaderProvider).items()
        if inspect.isfunction(member) and not name.startswith("_") and name not in ("acquire", "release")
    )


class _Recording(vio.ImageReaderProvider):
    """A provider that records each optional method called on it with its arguments, answering each
    with an object of its own (None where it returns nothing); it opens no file."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self._answers = {name: object() for name in optional_methods()}
        for name in optional_methods():
            setattr(self, name, functools.partial(self._record, name))

    def answer(self, name: str):
        """What the method `name` answers."""
        returns = inspect.signature(getattr(vio.ImageReaderProvider, name)).return_annotation
        return None if returns in (None, "None") else self._answers[name]

    def _record(self, name: str, *args):
        self.calls.append((name, args))
        return self.answer(name)

    def acquire(self, key):
        raise AssertionError(f"{key}: acquired from the provider behind, where an optional method was called")

    def release(self, reader):
        raise AssertionError(f"{reader.key}: released to the provider behind")


class WrapperConformance:
    """What a provider in front of another (its `backing`) passes on. Subclass it as `TestSomething`.

    Each optional method of `vio.ImageReaderProvider` (`optional_methods`) is either
    passed on to the provider behind, with its arguments and its answer, or
    named in `changes` and overridden: a method the base class gains later
    and a wrapper drops fails the test. Each method is called with the key of
    a file the wrapper holds nothing of, and small distinct integers for its
    other arguments; a wrapper derived from `WrappingImageReaderProvider`
    passes on all of them but those it overrides.

    Class attributes:
        changes: The optional methods the wrapper answers itself, for any key.

    Hooks:
        wrap: The wrapper under test, in front of a given provider.
    """

    changes: ClassVar[frozenset[str]] = frozenset()

    key: ClassVar[str] = "elsewhere.mrcs"
    """The key the methods are called with: of no file the wrapper holds anything of."""

    def wrap(self, backing: vio.ImageReaderProvider, folder: Path) -> vio.ImageReaderProvider:
        """The wrapper under test in front of `backing`; it may make files in `folder`."""
        raise NotImplementedError

    def _arguments(self, name: str) -> tuple:
        parameters = list(inspect.signature(getattr(vio.ImageReaderProvider, name)).parameters)[1:]
        key, keys = self.key, (self.key,)
        return tuple(
            key if p == "key" else keys if p == "keys" else number for number, p in enumerate(parameters, 1)
        )

    def test_passes_on_what_it_does_not_change(self, tmp_path):
        backing = _Recording()
        wrapper = self.wrap(backing, tmp_path)
        for name in optional_methods():
            if name in self.changes:
                continue
            backing.calls.clear()
            arguments = self._arguments(name)
            answer = getattr(wrapper, name)(*arguments)
            assert (name, arguments) in backing.calls, f"{type(wrapper).__name__}.{name} is not passed on"
            assert answer is backing.answer(name), f"{type(wrapper).__name__}.{name} answers otherwise"

    def test_overrides_what_it_changes(self, tmp_path):
        wrapper = self.wrap(_Recording(), tmp_path)
        for name in self.changes:
            assert name in optional_methods(), f"{name} is no optional method of ImageReaderProvider"
            owner = next(kind for kind in type(wrapper).__mro__ if name in vars(kind))
            assert owner not in (vio.ImageReaderProvider, WrappingImageReaderProvider), (
                f"{type(wrapper).__name__}.{name} is named a change but is {owner.__name__}'s"
            )
