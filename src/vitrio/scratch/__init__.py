"""Scratch: a copy of the images a program keeps going back to, in RAM or in a mapped file.

`plan` lays a scratch out, `store` takes images in and serves them,
`mapped` keeps one in a file that outlives the process, `directory` keeps
such files within a budget in a folder per user, `private` says which files
a scratch trusts on a shared machine, and `provider` puts a scratch in front
of the files.
"""

from .directory import create_directory_image_scratch
from .mapped import create_mapped_file_image_scratch
from .provider import ScratchImageReaderProvider, prefetch_scratch_async
from .store import ImageScratch, create_host_image_scratch

__all__ = [
    "ImageScratch",
    "ScratchImageReaderProvider",
    "create_host_image_scratch",
    "create_mapped_file_image_scratch",
    "create_directory_image_scratch",
    "prefetch_scratch_async",
]
