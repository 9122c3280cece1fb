"""Feeding images and their metadata to a model, a batch at a time.

For instance::

    import vitrio as vio

    particles = vio.data.read_particles("Refine3D/job010/run_data.star")  # or a cryoSPARC .cs file
    locations = vio.data.particle_locations(particles, "Refine3D/job010/run_data.star")
    dataset = vio.data.Dataset({
        "image": vio.data.ImageSource(locations, data_type="float32"),
        "defocus": particles[["rlnDefocusU", "rlnDefocusV"]].to_numpy(),
        "pixel_size": particles["rlnImagePixelSize"].to_numpy(),
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
read_particles reads the particles of RELION (any version, optics merged)
or cryoSPARC (`.cs`), and particle_locations says where their images are,
resolving paths as docs/paths-and-types.md says; read_stack_list and
stack_locations do the same for a list of stacks. read_star, star_table,
write_star and particle_optics read and write the STAR files of RELION
(through starfile and pandas: the `star` extra, which a missing one's
error names).

A read given no loader goes through `shared_loader()`, the process's own.
A RecyclingAllocator, the DataLoader's default, reads batches into the
memory of those the program has let go of. A DataLoader's `stats` (a LoaderStats) say how long the
program waited for data and what the reads did (a ReadStats, as the core's
`ImageLoader.stats()` gives it). FourierCrop, Normalize, Standardize and Invert (or their
Compose) prepare a batch of images, as a DataLoader's transform or, through a
PreparedSource, once for every epoch (docs/preparing.md).

Needs numpy. PyTorch and JAX are imported only to hand batches to them.
"""

from ._augment3d import (
    Augmentation,
    RandomBeamRotation,
    RandomFlip,
    RandomGaussianNoise,
    RandomIntensity,
    RandomLowPass,
    RandomRot90,
)
from ._copick import copick_picks
from ._cs import read_cs
from ._dataset import Dataset, PendingBatch
from ._images import ImageSource
from ._loader import DataLoader
from ._particles import particle_locations, read_particles
from ._patches import PatchSource
from ._paths import PathResolver, read_stack_list, stack_locations
from ._picks import TomogramPicks
from ._picks_sampling import BalancedBatchSampler, background_centres, class_weights, split_by_tomogram
from ._prepared import PreparedSource
from ._recycling import RecyclingAllocator
from ._sampler import BatchSampler
from ._shared import shared_loader
from ._source import ArraySource, Source
from ._standardize import Standardize
from ._star import particle_optics, read_star, read_star_particles, star_table, write_star
from ._stats import LoaderStats, ReadStats
from ._tables import as_columns, make_locations, parse_locations
from ._tomography import tomogram_picks
from ._transforms import Compose, FourierCrop, Invert, Normalize, Transform

__all__ = [
    "ArraySource",
    "Augmentation",
    "BalancedBatchSampler",
    "BatchSampler",
    "Compose",
    "DataLoader",
    "Dataset",
    "FourierCrop",
    "ImageSource",
    "Invert",
    "LoaderStats",
    "Normalize",
    "PatchSource",
    "PathResolver",
    "PendingBatch",
    "PreparedSource",
    "RandomBeamRotation",
    "RandomFlip",
    "RandomGaussianNoise",
    "RandomIntensity",
    "RandomLowPass",
    "RandomRot90",
    "ReadStats",
    "RecyclingAllocator",
    "Source",
    "Standardize",
    "TomogramPicks",
    "Transform",
    "as_columns",
    "background_centres",
    "class_weights",
    "copick_picks",
    "make_locations",
    "parse_locations",
    "particle_locations",
    "particle_optics",
    "read_cs",
    "read_particles",
    "read_stack_list",
    "read_star",
    "read_star_particles",
    "shared_loader",
    "split_by_tomogram",
    "stack_locations",
    "star_table",
    "tomogram_picks",
    "write_star",
]
