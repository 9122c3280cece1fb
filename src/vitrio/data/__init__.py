"""Feeding images and their metadata to a model, a batch at a time.

For instance::

    import vitrio as vio

    particles = starfile.read("particles.star", always_dict=True)["particles"]
    dataset = vio.data.Dataset({
        "image": vio.data.ImageSource(
            vio.data.parse_locations(particles["rlnImageName"]), data_type="float32"
        ),
        "defocus": particles[["rlnDefocusU", "rlnDefocusV"]].to_numpy(),
    })
    for batch in vio.data.DataLoader(dataset, 64, shuffle=True):
        ...

A Dataset is rows of named fields. A field is a source, which reads its
values from files (ImageSource, PatchSource) or holds them in memory
(ArraySource), or a column of metadata. A DataLoader goes through a dataset
in batches, reading the next ones on a thread pool meanwhile, and hands them
out as numpy arrays, tensors of PyTorch or arrays of JAX. The metadata is
parsed by whoever reads it: vitrio takes what it was parsed into, and
as_columns, parse_locations and make_locations turn that into fields.
read_star, star_table, write_star and particle_optics read and write the
STAR files of RELION (through starfile, with pandas).

A read given no loader goes through `shared_loader()`, the process's own.

Needs numpy. PyTorch and JAX are imported only to hand batches to them.
"""

from ._dataset import Dataset, PendingBatch
from ._images import ImageSource
from ._loader import DataLoader
from ._patches import PatchSource
from ._sampler import BatchSampler
from ._shared import shared_loader
from ._source import ArraySource, Source
from ._star import particle_optics, read_star, star_table, write_star
from ._tables import as_columns, make_locations, parse_locations

__all__ = [
    "ArraySource",
    "BatchSampler",
    "DataLoader",
    "Dataset",
    "ImageSource",
    "PatchSource",
    "PendingBatch",
    "Source",
    "as_columns",
    "make_locations",
    "parse_locations",
    "particle_optics",
    "read_star",
    "shared_loader",
    "star_table",
    "write_star",
]
