"""EER files: Thermo Fisher's electron event representation of movies.

An EER file is a TIFF file whose pages are the frames of a movie. A page
holds, instead of pixel values, a stream of codes (TIFF compressions 65000,
65001 and 65002): runs of pixels without an event, each followed by the
sub-pixel position of an electron that hit the pixel after the run.
Compression 65000 codes runs in 8 bits and 65001 in 7, both with 2 + 2
sub-pixel bits (a 4 x 4 grid in each pixel); 65002 takes the three numbers
from tags 65007, 65008 and 65009. The sub-pixel grid is the finest one: 4
times the detector's resolution on each axis for 2 sub-pixel bits.

Opened as a plain format, an EER file is a movie of one uint8 image per
frame (0 or 1 event per pixel) at the detector's resolution.
`EerFormat.configured` makes a format that renders the frames into a few
fractions (sums of consecutive frames), binned or on a finer grid, optionally
weighted by a gain reference. `read_events` reads the events themselves.

A reader's `voxel_size` is the size of a pixel of its images in Å, from the
acquisition metadata that the first page holds as XML in tag 65001: the
sensor's pixel at the specimen (`sensorPixelSize.height` and `.width`),
times the binning, divided by the super-resolution. The XML is parsed only
if it is at most 1 MiB and declares no entity; metadata missing, malformed
or without a usable length gives None, and the frames read all the same.

Frames are decoded by the C extension `vitrio._native`, without the GIL.

Events are also read through the published API's objects: a
`DetectorEventTimelineReaderProvider` hands out a `DetectorEventTimelineReader`
of an acquisition (its `DetectorEventTimelineDescriptor`), and a
`DetectorEventRenderer` turns the events of a fraction of time
(`DetectorEventFractionation`) into an image at a `DetectorEventBinning`.

Modules: `_sniff` tells an EER file by its first bytes, `_layout` finds its
strips and pixel size, `_gain` loads gain references, `_reader` holds the
format and its image reader, `_events` the event timeline and the decoding
of frames into it, `_timeline` the event readers, their providers and
`read_events`, `_render` fractionation, binning and renderers.
"""

from ._events import DetectorEventTimeline
from ._reader import EerFormat, EerReader
from ._render import (
    CountingDetectorEventRenderer,
    DetectorEventBinning,
    DetectorEventFractionation,
    DetectorEventRenderer,
)
from ._timeline import (
    DetectorEventTimelineDescriptor,
    DetectorEventTimelineReader,
    DetectorEventTimelineReaderProvider,
    EerTimelineReader,
    FileDetectorEventTimelineReaderProvider,
    detector_event_timeline_reader_provider,
    read_events,
)

__all__ = [
    "CountingDetectorEventRenderer",
    "DetectorEventBinning",
    "DetectorEventFractionation",
    "DetectorEventRenderer",
    "DetectorEventTimeline",
    "DetectorEventTimelineDescriptor",
    "DetectorEventTimelineReader",
    "DetectorEventTimelineReaderProvider",
    "EerFormat",
    "EerReader",
    "EerTimelineReader",
    "FileDetectorEventTimelineReaderProvider",
    "detector_event_timeline_reader_provider",
    "read_events",
]
