"""File formats: the contract a format fulfils, the registry it joins, and the built-in formats.

A format is a `Format` subclass registered with `register_format`; see
`_contract` for what a reader and a writer do and `_registry` for how a
file finds its format. A format reads a file's bytes through the
`ByteSource` it is given, local or at a URL alike. Importing this package registers the built-in
formats of `_BUILT_IN`, in the order they are tried: OME-Zarr
(`OmeZarrFormat`, of `vitrio.formats.zarr`; reading needs no zarr), its
stores claimed by key before any file is opened; EER before
TIFF, as an EER file is a TIFF container; then MRC and DM.
`PartialFile` and `new_file` are how a format's writer creates its
file: privately beside its path, moved there when complete; `writing_in`
has the files made in a folder opened beforehand (by `open_subfolder`,
without following links), whatever its path names by then. `open_readonly`
is how a format that opens files of its own opens them: regular files only,
never blocking on a FIFO.
`load_plugin_formats()` registers the formats installed packages declare
under the entry point group `vitrio.formats`, once per process; it runs by
itself the first time no registered format claims a file, and from
`registered_formats()`.
"""

from .._fs import open_readonly, open_subfolder
from .._partial import PartialFile, new_file, writing_in
from .._storage import ByteSource
from ._contract import Format, FormatError, FormatWarning, HeaderStatistics, ImageReader, ImageWriter
from ._raw import RawArrayReader
from ._raw_writer import RawArrayWriter, Statistics
from ._registry import (
    create_writer,
    load_plugin_formats,
    open_reader,
    register_format,
    registered_formats,
    resolve_formats,
)
from ._selectors import (
    DetectorEventTimelineFileReadFormatSelector,
    FormatSelector,
    ImageFileReadFormatSelector,
    ImageFileWriteFormatSelector,
)
from .dm import DigitalMicrographFormat
from .eer import EerFormat
from .mrc import MrcFormat
from .tiff import TiffFormat
from .zarr import OmeZarrFormat

_BUILT_IN: tuple[type[Format], ...] = (
    OmeZarrFormat,
    EerFormat,
    TiffFormat,
    MrcFormat,
    DigitalMicrographFormat,
)
"""The built-in formats, in the order they are tried (after the plug-ins and formats registered later)."""

for _format in reversed(_BUILT_IN):  # each registered format is tried before those registered earlier
    register_format(_format)
del _format

__all__ = [
    "ByteSource",
    "Format",
    "FormatError",
    "FormatWarning",
    "HeaderStatistics",
    "OmeZarrFormat",
    "ImageReader",
    "ImageWriter",
    "RawArrayReader",
    "RawArrayWriter",
    "Statistics",
    "PartialFile",
    "new_file",
    "open_readonly",
    "open_subfolder",
    "writing_in",
    "load_plugin_formats",
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
