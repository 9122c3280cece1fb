"""An HDF5 file that may come from anyone, opened through its descriptor, and a dataset found in it
through hard links only and stored in the file itself."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import h5py

import vitrio as vio
from vitrio.formats import ByteSource, FormatError, open_readonly

_H5PY_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, SystemError)
"""What h5py raises for a malformed file: libhdf5's errors, as whichever of these it maps them to, and
``SystemError`` for one raised in a callback (such as a link name that is not UTF-8)."""


@contextlib.contextmanager
def malformed(key: str) -> Iterator[None]:
    """Turns what h5py raises for a malformed file into a ``FormatError`` naming the file."""
    try:
        yield
    except FormatError:
        raise
    except _H5PY_ERRORS as error:
        raise FormatError(f"{key}: malformed HDF5 file: {error}") from error


def open_file(key: str, source: ByteSource) -> h5py.File:
    """The HDF5 file whose bytes ``source`` reads, read through it and never opened again by its path.

    Raises:
        FormatError: If it is not a readable HDF5 file.
    """
    try:
        return h5py.File(source.open_blocks(), "r")
    except _H5PY_ERRORS as error:
        raise FormatError(f"{key}: not a readable HDF5 file: {error}") from error


@contextlib.contextmanager
def regular_file(path: str | os.PathLike[str]) -> Iterator[int]:
    """A descriptor of the regular file at ``path``, opened without blocking (a FIFO or device refused).

    Raises:
        FileNotFoundError: If there is no file at ``path``.
        OSError: If it is not a regular file.
    """
    key = os.fspath(path)
    try:
        fd = open_readonly(key)
    except FileNotFoundError:
        raise FileNotFoundError(f"{key}: no such file") from None
    try:
        yield fd
    finally:
        os.close(fd)


def image_descriptor(key: str, name: str, dataset: h5py.Dataset) -> vio.ImageDescriptor:
    """The images dataset ``name`` holds: 2 dimensions an image, 3 a volume, more a stack of volumes.

    Raises:
        FormatError: If it has fewer than 2 dimensions, or values vitrio does not read.
    """
    if dataset.ndim < 2:
        raise FormatError(f"{key}: dataset {name!r} of shape {dataset.shape} is not an image or volume")
    try:
        return vio.ImageDescriptor(dataset.shape, min(dataset.ndim, 3), dataset.dtype)
    except (TypeError, ValueError) as error:
        raise FormatError(f"{key}: dataset {name!r} holds values of type {dataset.dtype}") from error


def link_kind(link: Any) -> str | None:
    """What a link that is not a hard link points at, or None for a hard link."""
    if isinstance(link, h5py.SoftLink):
        return f"a soft link to {link.path!r}"
    if isinstance(link, h5py.ExternalLink):
        return f"an external link to {link.path!r} in {link.filename!r}"
    return None


def stored_dataset(key: str, file: h5py.File, name: str) -> h5py.Dataset:
    """Dataset ``name`` of ``file``, reached through hard links only and stored in the file itself.

    Raises:
        FormatError: If there is no such dataset, a link on its path is soft or external, or its
            values lie in other files (external raw storage, a virtual dataset).
    """
    node: Any = file
    parts = [part for part in name.split("/") if part]
    for depth, part in enumerate(parts):
        link = node.get(part, getlink=True) if isinstance(node, h5py.Group) else None
        if link is None:
            raise FormatError(f"{key}: no dataset {name!r}; the file holds {_names(file)}")
        kind = link_kind(link)
        if kind is not None:
            path = "/".join(parts[: depth + 1])
            raise FormatError(f"{key}: {path!r} is {kind}; links out of the dataset's path are not followed")
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        raise FormatError(f"{key}: no dataset {name!r}; the file holds {_names(file)}")
    if node.is_virtual:
        raise FormatError(f"{key}: dataset {name!r} is virtual, mapped from other files, which are not read")
    if node.external:
        files = sorted({os.fsdecode(entry[0]) for entry in node.external})
        raise FormatError(f"{key}: dataset {name!r} is stored in other files {files}, which are not read")
    return node


def _names(file: h5py.File) -> list[str]:
    """The datasets of a file reached through hard links, without opening what other links point at."""
    names: list[str] = []

    def visit(name: bytes, info: Any) -> None:
        path = name.decode(errors="replace")
        if info.type == h5py.h5l.TYPE_HARD and isinstance(file.get(path), h5py.Dataset):
            names.append(path)

    file.id.links.visit(visit, info=True)
    return names
