"""vitrio: cryo-EM images read in batches on a thread pool, straight into the caller's memory.

The core reads and writes MRC, TIFF, EER and DM files whole, an image of a
stack at a time, or in batches spread over many files; it crops patches
around centres. `vitrio.data` feeds datasets to PyTorch and JAX.
"""

from . import data, formats
from ._concurrency import Completion, SynchronousExecutor, ThreadPoolExecutor
from ._functions import (
    loader,
    query_descriptor,
    read,
    reader_provider,
    saver,
    write,
    write_single,
    write_stack,
    writer_provider,
)
from ._loading import (
    ImageLoader,
    read_batch_async,
    read_indexed_async,
    read_patches_async,
    read_patches_indexed_async,
)
from ._providers import (
    CachingImageReaderProvider,
    FileImageReaderProvider,
    FileImageWriterProvider,
    ImageReaderProvider,
    detector_event_image_reader_provider,
)
from ._saving import ImageSaver, write_batch_async
from ._types import (
    ImageDescriptor,
    ImageLocation,
    ImageLocationGrouping,
    IndexTable,
    NumericalType,
    get_core_extents,
)
from .formats import Format, FormatError, FormatWarning, register_format
from .formats.eer import DetectorEventTimeline, read_events
from .scratch import (
    ImageScratch,
    ScratchImageReaderProvider,
    create_directory_image_scratch,
    create_host_image_scratch,
    create_mapped_file_image_scratch,
    prefetch_scratch_async,
)

__version__ = "0.1.0"

__all__ = [
    "CachingImageReaderProvider",
    "Completion",
    "DetectorEventTimeline",
    "FileImageReaderProvider",
    "FileImageWriterProvider",
    "Format",
    "FormatError",
    "FormatWarning",
    "ImageDescriptor",
    "ImageLoader",
    "ImageLocation",
    "ImageLocationGrouping",
    "ImageReaderProvider",
    "ImageSaver",
    "ImageScratch",
    "IndexTable",
    "NumericalType",
    "ScratchImageReaderProvider",
    "SynchronousExecutor",
    "ThreadPoolExecutor",
    "data",
    "formats",
    "create_directory_image_scratch",
    "create_host_image_scratch",
    "create_mapped_file_image_scratch",
    "detector_event_image_reader_provider",
    "get_core_extents",
    "loader",
    "prefetch_scratch_async",
    "query_descriptor",
    "read",
    "read_batch_async",
    "read_events",
    "read_indexed_async",
    "read_patches_async",
    "read_patches_indexed_async",
    "reader_provider",
    "register_format",
    "saver",
    "write",
    "write_batch_async",
    "write_single",
    "write_stack",
    "writer_provider",
]
