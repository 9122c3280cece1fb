"""The conformance suite, run for every format this library writes, and for files other programs make."""

from __future__ import annotations

import mrcfile
import numpy as np
import tifffile

from .conformance import FormatConformance
from .helpers import NUMPY_TYPES

MRC_TYPES = ("float32", "int8", "int16", "uint16", "float16", "complex64")
TIFF_TYPES = NUMPY_TYPES


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
