"""Tomograms and their labels read through vitrio, batched for a model, and its predictions written back.

``TomogramDataset`` (``cryovit.dataset``) reads the tomograms of a list of ``FileData`` (MRC, TIFF or
HDF5) whole or as random crops, as ``TomogramData``; ``collate_tomograms`` (``cryovit.collate``) pads
them into a ``BatchedTomogramData``; ``model_result`` (``cryovit.results``) turns a batch and the
model's predictions into a ``BatchedModelResult``, and ``write_predictions`` writes its predictions as
MRC or HDF5 files named after the tomograms. This module gathers them.

Files and labels (as the CryoViT pipeline stores and reads them):

- A tomogram is a volume ``[D, H, W]`` (an MRC or TIFF volume, a stack of ``D`` sections, or an HDF5
  dataset), read channel-first as ``[1, D, H, W]``; a 4-D HDF5 dataset ``[C, D, H, W]`` (such as
  ``dino_features``) as its ``C`` channels. uint8 is scaled to [0, 1], float kept as it is. In an
  HDF5 file it is the dataset ``data`` (or the one named by ``data_key``); ``cryovit.hdf5`` is the
  vitrio format plug-in that reads it.
- An HDF5 label file holds one volume per label, ``labels/<name>``; a voxel is in the label where the
  volume is positive, and not annotated (-1) where it is negative. ``FileData.labels`` is not used
  for such files: the file says what it holds.
- An MRC or TIFF label file holds one integer volume for all labels: 0 is background,
  ``FileData.labels[i]`` is the label of value ``i + 1``, and a negative value is not annotated.
- Labels are float32: 1, 0, and -1 (``LABEL_PADDING``) where not annotated or padded, which the
  pipeline's losses leave out with ``y_true > -1``.
- An OME-Zarr tomogram and label volume (``vitrio.formats.zarr``, local or a URL such as the CryoET
  Data Portal's ``s3://`` stores) are read as MRC files are: crops fetch only the chunks they touch.
"""

try:
    from .collate import LABEL_PADDING, collate_tomograms, input_volume
    from .dataset import TomogramDataset
    from .results import model_result, write_predictions
except ModuleNotFoundError as error:
    if error.name not in ("torch", "tensordict", "h5py"):
        raise
    raise ModuleNotFoundError(
        f"cryovit.data needs {error.name}, which is not installed: pip install 'vitrio[cryovit]'",
        name=error.name,
    ) from None

__all__ = [
    "LABEL_PADDING",
    "TomogramDataset",
    "collate_tomograms",
    "input_volume",
    "model_result",
    "write_predictions",
]
