"""Planning batch reads: group by file, coalesce runs of consecutive images, split into tasks.

A batch becomes a few tasks per worker thread. Each task takes a stretch of
the destination's slots. The images of raw files whose layout the provider
knows (`ImageReaderProvider.layout`) are planned with numpy into runs of
consecutive images, (file, offset, length, destination) each, and read by
one native call that opens each file, reads, converts and closes it without
the GIL (`vitrio.formats.read_runs`): no Python per image or per file
beyond a lookup. The rest is grouped by file; the provider's reader of each
file is asked once and handed all its indices and slots in one call. The
patches of one image are cropped by one call of its reader, a native one
for raw files.
"""

from ._images import read_batch_async, read_indexed_async
from ._loader import ImageLoader, check_leading_extent, plan_locations, task_bounds
from ._patches import read_patches_async, read_patches_indexed_async

__all__ = [
    "ImageLoader",
    "read_batch_async",
    "read_patches_async",
    "read_indexed_async",
    "read_patches_indexed_async",
    "plan_locations",
    "task_bounds",
    "check_leading_extent",
]
