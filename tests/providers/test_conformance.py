"""The provider conformance suite of `vitrio.testing.conformance`, run for every reader provider of
vitrio: the file provider, the caching one (with room for every file and for one), the EER one, and
the scratch one (holding every file in RAM, some of them, or every file in a mapped file)."""

from __future__ import annotations

import numpy as np

import vitrio as vio
from vitrio.testing.conformance import ProviderConformance
from vitrio.testing.eer import random_movie


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
