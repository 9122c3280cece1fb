"""vitrio: cryo-EM images read in batches on a thread pool, straight into the caller's memory.

The core reads and writes MRC, TIFF, EER and DM files whole, an image of a
stack at a time, or in batches spread over many files; it crops patches
around centres. `vitrio.data` feeds datasets to PyTorch and JAX.
"""

from . import data, formats
from ._array import Array, HalfComplexArray
from ._concurrency import Completion, Executor, SynchronousExecutor, ThreadPoolExecutor
from ._config import Configuration, configuration, configure
from ._errors import VitrioError
from ._event_images import DetectorEventImageReaderProvider, detector_event_image_reader_provider
from ._executor_io import ExecutorImageLoader, ExecutorImageSaver
from ._functions import (
    loader,
    query_descriptor,
    query_metadata,
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
    ImageReaderProvider,
)
from ._saving import ImageSaver, write_batch_async
from ._storage import Storage
from ._types import (
    DeclaredTwiceError,
    DestinationTypeError,
    ImageDescriptor,
    ImageFileNotFoundError,
    ImageLocation,
    ImageLocationGrouping,
    ImageMetadata,
    IncompleteFileError,
    IndexTable,
    NumericalType,
    ReadOnlyDestinationError,
    get_core_extents,
)
from ._writers import FileImageWriterProvider, ImageWriterProvider
from .formats import (
    DetectorEventTimelineFileReadFormatSelector,
    Format,
    FormatError,
    FormatWarning,
    ImageFileReadFormatSelector,
    ImageFileWriteFormatSelector,
    register_format,
)
from .formats.eer import (
    CountingDetectorEventRenderer,
    DetectorEventBinning,
    DetectorEventFractionation,
    DetectorEventRenderer,
    DetectorEventTimeline,
    DetectorEventTimelineDescriptor,
    DetectorEventTimelineReader,
    DetectorEventTimelineReaderProvider,
    FileDetectorEventTimelineReaderProvider,
    detector_event_timeline_reader_provider,
    read_events,
)
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
    "Array",
    "CachingImageReaderProvider",
    "Completion",
    "Configuration",
    "CountingDetectorEventRenderer",
    "DeclaredTwiceError",
    "DetectorEventBinning",
    "DetectorEventFractionation",
    "DetectorEventImageReaderProvider",
    "DetectorEventRenderer",
    "DetectorEventTimeline",
    "DetectorEventTimelineDescriptor",
    "DetectorEventTimelineFileReadFormatSelector",
    "DetectorEventTimelineReader",
    "DetectorEventTimelineReaderProvider",
    "Executor",
    "ExecutorImageLoader",
    "ExecutorImageSaver",
    "FileDetectorEventTimelineReaderProvider",
    "FileImageReaderProvider",
    "FileImageWriterProvider",
    "Format",
    "FormatError",
    "FormatWarning",
    "HalfComplexArray",
    "ImageDescriptor",
    "ImageFileNotFoundError",
    "ImageFileReadFormatSelector",
    "ImageFileWriteFormatSelector",
    "ImageLoader",
    "ImageLocation",
    "ImageLocationGrouping",
    "ImageReaderProvider",
    "ImageSaver",
    "ImageScratch",
    "ImageWriterProvider",
    "IndexTable",
    "NumericalType",
    "ReadOnlyDestinationError",
    "VitrioError",
    "ScratchImageReaderProvider",
    "Storage",
    "SynchronousExecutor",
    "ThreadPoolExecutor",
    "configuration",
    "configure",
    "data",
    "formats",
    "create_directory_image_scratch",
    "create_host_image_scratch",
    "create_mapped_file_image_scratch",
    "detector_event_image_reader_provider",
    "detector_event_timeline_reader_provider",
    "get_core_extents",
    "loader",
    "prefetch_scratch_async",
    "query_descriptor",
    "query_metadata",
    "ImageMetadata",
    "DestinationTypeError",
    "IncompleteFileError",
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
