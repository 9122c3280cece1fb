"""Providers in front of others pass on what they do not change: a file the scratch does not hold keeps
the layout its provider knows (a loader reads it with one native call, opening no reader), one it holds
has none; and a method the base class gains later fails the wrapper suite of a wrapper that drops it."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio
from vitrio._providers import NO_LAYOUT
from vitrio.testing.wrapping import WrapperConformance


class CountingFiles(vio.FileImageReaderProvider):
    """Opens files as the file provider does, counting the readers it hands out by key."""

    def __init__(self):
        super().__init__()
        self.acquired: dict[str, int] = {}

    def acquire(self, key):
        reader = super().acquire(key)
        self.acquired[reader.key] = self.acquired.get(reader.key, 0) + 1
        return reader


def _stacks(folder):
    rng = np.random.default_rng(7)
    made = {}
    for name in ("held.mrcs", "other.mrcs"):
        values = rng.integers(0, 99, size=(3, 8, 6)).astype(np.float32)
        vio.write_stack(values, folder / name)
        made[folder / name] = values
    return made


def test_a_file_the_scratch_does_not_hold_is_read_by_its_layout(tmp_path):
    (held, _), (other, values) = _stacks(tmp_path).items()
    files = CountingFiles()
    provider = vio.ScratchImageReaderProvider(files, vio.create_host_image_scratch([held], run_length=2))
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(2), provider)
    opened = []
    for _ in range(3):
        out = np.zeros_like(values)
        vio.read_batch_async(loader, out, [vio.ImageLocation(other, i) for i in range(3)]).get()
        np.testing.assert_array_equal(out, values)
        opened.append(files.acquired[str(other)])
    assert opened[0] == opened[-1], f"its reader is opened for each batch, the layout unused: {opened}"
    assert provider.layout(str(other)) is files.layout(str(other)) is not None


def test_a_file_the_scratch_holds_has_no_layout(tmp_path):
    (held, values), _ = _stacks(tmp_path).items()
    files = CountingFiles()
    provider = vio.ScratchImageReaderProvider(files, vio.create_host_image_scratch([held], run_length=2))
    loader = vio.ImageLoader(vio.ThreadPoolExecutor(2), provider)
    for _ in range(2):
        out = np.zeros_like(values)
        vio.read_batch_async(loader, out, [vio.ImageLocation(held, i) for i in range(3)]).get()
        np.testing.assert_array_equal(out, values)
    assert files.layout(str(held)) is not None and provider.layout(str(held)) is NO_LAYOUT
    assert provider.query_descriptor(held) == vio.query_descriptor(held)


def test_a_method_dropped_fails_the_wrapper_suite(tmp_path, monkeypatch):
    class Dropping(vio.ImageReaderProvider):
        def __init__(self, backing):
            self.backing = backing

        def layout(self, key):
            return self.backing.layout(key)

    class TestDropping(WrapperConformance):
        def wrap(self, backing, folder):
            return Dropping(backing)

    class TestCaching(WrapperConformance):
        changes = frozenset({"query_descriptor", "query_descriptors"})

        def wrap(self, backing, folder):
            return vio.CachingImageReaderProvider(backing, capacity=2)

    def later(self, key: str) -> int | None:
        """A method the base class gains later."""
        return None

    with pytest.raises(AssertionError, match="Dropping.forget_layout is not passed on"):
        TestDropping().test_passes_on_what_it_does_not_change(tmp_path)
    monkeypatch.setattr(vio.ImageReaderProvider, "later", later, raising=False)
    with pytest.raises(AssertionError, match="CachingImageReaderProvider.later is not passed on"):
        TestCaching().test_passes_on_what_it_does_not_change(tmp_path)


def test_the_scratch_answers_many_files_as_each_alone(tmp_path):
    """Asked for many descriptors, a scratch gives its own of the files it holds and asks the provider
    behind of the others, in order, as it answers each one alone."""
    (held, _), (other, _) = _stacks(tmp_path).items()
    vio.write_stack(np.zeros((5, 8, 6), np.float32), tmp_path / "third.mrcs")
    provider = vio.ScratchImageReaderProvider(
        vio.FileImageReaderProvider(), vio.create_host_image_scratch([held], run_length=2)
    )
    keys = [other, held, tmp_path / "third.mrcs", held]
    assert list(provider.query_descriptors(keys)) == [provider.query_descriptor(key) for key in keys]
    extents = [descriptor.extents for descriptor in provider.query_descriptors(keys)]
    assert extents == [(3, 8, 6), (3, 8, 6), (5, 8, 6), (3, 8, 6)]
