"""The provider conformance suite of `vitrio.testing.conformance`, run for every reader provider of
vitrio: the file provider, the caching one (with room for every file and for one), the EER one, and
the scratch one (holding every file in RAM, some of them, or every file in a mapped file); and the
wrapper suite for every provider of vitrio in front of another."""

from __future__ import annotations

import numpy as np

import vitrio as vio
from vitrio._providers import WrappingImageReaderProvider
from vitrio.data._prepared_scratch import PreparedFiles
from vitrio.testing.conformance import ProviderConformance
from vitrio.testing.eer import random_movie
from vitrio.testing.wrapping import WrapperConformance


class TestFileProvider(ProviderConformance):
    def provider(self, paths):
        return vio.FileImageReaderProvider()


class TestCachingProvider(ProviderConformance):
    def provider(self, paths):
        return vio.CachingImageReaderProvider(vio.FileImageReaderProvider(), capacity=8)


class TestCachingProviderOfOne(ProviderConformance):
    """Fewer readers kept than files read: each acquire may close another."""

    def provider(self, paths):
        return vio.CachingImageReaderProvider(vio.FileImageReaderProvider(), capacity=1)


class TestEerProvider(ProviderConformance):
    """EER movies of 4 frames read as 2 fractions, each the sum of its 2 frames."""

    extension = ".eer"

    def provider(self, paths):
        return vio.detector_event_image_reader_provider(fractions=2)

    def make(self, path, rng):
        movie = random_movie(path, frames=4, shape=(12, 10), density=0.3, seed=int(rng.integers(1 << 30)))
        return movie.counts().reshape(2, 2, 12, 10).sum(axis=1)


class TestEerProviderCached(TestEerProvider):
    def provider(self, paths):
        return vio.detector_event_image_reader_provider(fractions=2, cache=2)


class TestScratchProvider(ProviderConformance):
    def provider(self, paths):
        return vio.reader_provider(scratch=vio.create_host_image_scratch(paths, run_length=2))


class TestScratchProviderHoldingSome(ProviderConformance):
    """A scratch with room for the first file only: the others are read from their files."""

    def provider(self, paths):
        room = vio.query_descriptor(paths[0]).extents
        scratch = vio.create_host_image_scratch(paths, run_length=2, max_size=int(np.prod(room)) * 4)
        assert scratch.keys == (str(paths[0]),)
        return vio.reader_provider(scratch=scratch)


class TestScratchProviderInAMappedFile(ProviderConformance):
    def provider(self, paths):
        scratch = vio.create_mapped_file_image_scratch(paths, paths[0].with_name("scratch"), run_length=3)
        return vio.reader_provider(scratch=scratch, cache=2)


class TestCachingProviderWraps(WrapperConformance):
    """It hands out the descriptor of the reader it keeps open, not one the provider behind opens anew."""

    changes = frozenset({"query_descriptor", "query_descriptors"})

    def wrap(self, backing, folder):
        return vio.CachingImageReaderProvider(backing, capacity=2)


class TestScratchProviderWraps(WrapperConformance):
    def wrap(self, backing, folder):
        held = folder / "held.mrcs"
        vio.write_stack(np.zeros((2, 4, 4), np.float32), held)
        scratch = vio.create_host_image_scratch([held], run_length=2)
        return vio.ScratchImageReaderProvider(backing, scratch)


class TestPreparedFilesWrap(WrapperConformance):
    """Its images are prepared: no file has a layout to read them by, and their descriptor is its own."""

    changes = frozenset({"layout", "query_descriptor", "query_descriptors"})

    def wrap(self, backing, folder):
        prepared = ((4, 4), np.dtype(np.float32))
        return PreparedFiles(backing, lambda images: images, (4, 4), np.dtype(np.float32), prepared, False)


def _wrappers(kind: type) -> set[type]:
    """`kind`'s subclasses in vitrio, at any depth."""
    found = {sub for sub in kind.__subclasses__() if sub.__module__.startswith("vitrio.")}
    return found.union(*(_wrappers(sub) for sub in kind.__subclasses__()))


def test_every_wrapper_of_vitrio_is_tested(tmp_path):
    tested = {
        type(case().wrap(vio.FileImageReaderProvider(), tmp_path))
        for case in WrapperConformance.__subclasses__()
    }
    assert _wrappers(WrappingImageReaderProvider) <= tested
