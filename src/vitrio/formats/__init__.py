"""File formats: the contract a format fulfils, the registry it joins, and the built-in formats.

A format is a `Format` subclass registered with `register_format`; see
`_contract` for what a reader and a writer do and `_registry` for how a
file finds its format. Importing this package registers MRC, TIFF, DM and
EER (EER after TIFF, so that an EER file, a TIFF container, is tried as EER
first).
"""

from . import dm, mrc, tiff  # noqa: F401, I001
from . import eer  # noqa: F401, I001
from ._contract import Format, FormatError, FormatWarning, HeaderStatistics, ImageReader, ImageWriter
from ._raw import RawArrayReader, RawArrayWriter, Statistics
from ._registry import create_writer, open_reader, register_format, registered_formats, resolve_formats
from ._selectors import (
    DetectorEventTimelineFileReadFormatSelector,
    FormatSelector,
    ImageFileReadFormatSelector,
    ImageFileWriteFormatSelector,
)

__all__ = [
    "Format",
    "FormatError",
    "FormatWarning",
    "HeaderStatistics",
    "ImageReader",
    "ImageWriter",
    "RawArrayReader",
    "RawArrayWriter",
    "Statistics",
    "register_format",
    "registered_formats",
    "resolve_formats",
    "open_reader",
    "create_writer",
    "FormatSelector",
    "ImageFileReadFormatSelector",
    "ImageFileWriteFormatSelector",
    "DetectorEventTimelineFileReadFormatSelector",
]
