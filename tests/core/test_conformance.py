"""The format conformance suite of `vitrio.testing.conformance`, run for every registered format (MRC,
TIFF, EER, DM and cryovit's HDF5 plug-in; OME-Zarr's are in `tests/zarr`), for files other programs
make, and through each kind of scratch."""

from __future__ import annotations

import h5py
import mrcfile
import numpy as np
import tifffile

import vitrio as vio
from cryovit.hdf5 import Hdf5Format
from vitrio.testing import eer
from vitrio.testing.conformance import FormatConformance
from vitrio.testing.dm import write_dm

from .helpers import NUMPY_TYPES

MRC_TYPES = ("float32", "int8", "int16", "uint16", "float16", "complex64")
TIFF_TYPES = NUMPY_TYPES
DM_TYPES = (*(t for t in NUMPY_TYPES if t not in ("int64", "uint64", "float16")), "bool")


def test_every_registered_format_has_a_suite():
    suites = {Hdf5Format, *(vio.formats.registered_formats())}
    assert {f.name for f in suites} == {"mrc", "tiff", "eer", "dm", "hdf5", "ome-zarr"}


# ---------------------------------------------------------------- MRC


class TestMrc(FormatConformance):
    extension = ".mrc"
    dtypes = MRC_TYPES


class TestMrcInt16(FormatConformance):
    extension = ".map"
    dtypes = ("int16",)


class TestMrcs(FormatConformance):
    extension = ".mrcs"
    dtypes = MRC_TYPES
    volumes = False
    image_is_stack = True


class TestMrcBigEndianByMrcfile(FormatConformance):
    """Big-endian files as mrcfile writes them."""

    extension = ".mrc"
    dtypes = ("float32", "int16", "uint16", "complex64", "float16")

    def make(self, path, values, core_rank):
        with mrcfile.new(str(path)) as mrc:
            mrc.set_data(values.astype(values.dtype.newbyteorder(">")))
            if core_rank == 2 and values.ndim == 3:
                mrc.set_image_stack()


# ---------------------------------------------------------------- TIFF


class TestTiff(FormatConformance):
    extension = ".tif"
    dtypes = TIFF_TYPES


class TestTiffZlibByTifffile(FormatConformance):
    """Compressed TIFF as tifffile writes it: decoded a page at a time."""

    extension = ".tiff"
    dtypes = TIFF_TYPES

    def make(self, path, values, core_rank):
        axes = "I" * (values.ndim - core_rank) + ("ZYX" if core_rank == 3 else "YX")
        tifffile.imwrite(path, values, photometric="minisblack", compression="zlib", metadata={"axes": axes})


class TestBigTiffByTifffile(FormatConformance):
    """Uncompressed big-endian BigTIFF as tifffile writes it."""

    extension = ".tif"
    dtypes = ("float32", "uint16", "complex64")

    def make(self, path, values, core_rank):
        axes = "I" * (values.ndim - core_rank) + ("ZYX" if core_rank == 3 else "YX")
        tifffile.imwrite(
            path,
            np.ascontiguousarray(values),
            photometric="minisblack",
            bigtiff=True,
            byteorder=">",
            metadata={"axes": axes},
        )


# ---------------------------------------------------------------- EER and DM, read only


class TestEer(FormatConformance):
    """EER movies of the encoder of `vitrio.testing.eer`: a frame counts at most one event per pixel."""

    extension = ".eer"
    dtypes = ("uint8",)
    volumes = False
    image_is_stack = True
    compression = 65001
    code = None
    rows_per_strip = None

    def sample(self, rng, shape, dtype):
        return rng.integers(0, 2, size=shape).astype(dtype)

    def make(self, path, values, core_rank):
        if core_rank != 2:
            raise ValueError(f"{path}: EER movies hold frames, not volumes")
        frames = values.reshape(-1, *values.shape[-2:])
        code = self.code or eer.FIXED_CODES[self.compression]
        rng = np.random.default_rng(len(frames))
        events = [eer.frame_events(frame, code, rng) for frame in frames]
        eer.write_movie(path, events, frames.shape[1:], self.compression, code, self.rows_per_strip)


class TestEerOfItsOwnCodeInStrips(TestEer):
    """Compression 65002 with a code of its own in the file, each frame in strips of 4 rows."""

    compression = 65002
    code = (5, 1, 3)
    rows_per_strip = 4


class TestDm4(FormatConformance):
    """DM4 files as `vitrio.testing.dm` makes them: a thumbnail, then the image or stack of images."""

    extension = ".dm4"
    dtypes = DM_TYPES
    volumes = False
    version = 4
    little = True

    def make(self, path, values, core_rank):
        if core_rank != 2:
            raise ValueError(f"{path}: DM images of this suite are 2-D")
        write_dm(path, values, self.version, self.little)


class TestDm3BigEndian(TestDm4):
    extension = ".dm3"
    version = 3
    little = False


# ---------------------------------------------------------------- cryovit's HDF5 plug-in


class TestHdf5(FormatConformance):
    """The `data` dataset of HDF5 files, as h5py writes it: 2-D an image, 3-D a volume, more a stack of
    volumes (so the stacks of this suite hold volumes)."""

    extension = ".h5"
    dtypes = NUMPY_TYPES
    item_rank = 3
    layout: dict = {}

    def make(self, path, values, core_rank):
        if core_rank != min(values.ndim, 3):
            raise ValueError(
                f"{path}: an HDF5 dataset of {values.ndim} axes has {min(values.ndim, 3)}-D items"
            )
        with h5py.File(path, "w") as file:
            file.create_dataset("data", data=values, **self.layout)


class TestHdf5Compressed(TestHdf5):
    """Chunked, gzip-compressed datasets: read through h5py."""

    layout = {"chunks": True, "compression": "gzip"}


# ---------------------------------------------------------------- through a scratch


class TestMrcThroughHostScratch(TestMrc):
    def readers(self, paths):
        return vio.reader_provider(scratch=vio.create_host_image_scratch(paths, run_length=2))


class TestTiffThroughMappedFileScratch(TestTiff):
    def readers(self, paths):
        scratch = vio.create_mapped_file_image_scratch(paths, f"{paths[0]}.scratch", run_length=2)
        return vio.reader_provider(scratch=scratch)


class TestMrcsThroughDirectoryScratch(TestMrcs):
    def readers(self, paths):
        directory = paths[0].parent / "scratch"
        return vio.reader_provider(scratch=vio.create_directory_image_scratch(paths, directory, 3, 1 << 20))
