"""What the tests read, drawn by Hypothesis, and what numpy slicing gives for it.

A batch is a list of slots, any of the file's images, repeated and in any
order. A set of patches is a patch shape and centres anywhere on the image
and past its edges (a patch may lie wholly outside it), patches overlapping
and repeated. `crop` is the reference: the centre at index `extent // 2` of
the patch, what lies beyond the image left as the destination held it.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import Phase, settings
from hypothesis import strategies as st

import vitrio as vio
from vitrio.formats import open_reader

from .files import Drawn

LONG = os.environ.get("VITRIO_DIFFERENTIAL", "").lower() == "long"
# The bounded run of `make test` draws the same examples every time; the long run draws new ones.
# Explaining a failure (which parts of it vary) reruns a slow test hundreds of times: it is shown as found.
QUICK = [phase for phase in Phase if phase != Phase.explain]
settings.register_profile(
    "differential", derandomize=True, database=None, deadline=None, print_blob=True, phases=QUICK
)
settings.register_profile("differential-long", database=None, deadline=None, print_blob=True, phases=QUICK)
LONG_FACTOR = 20


def examples(count: int) -> settings:
    """The settings of a differential test: `count` examples, `LONG_FACTOR` times as many in the long run."""
    profile = settings.get_profile("differential-long" if LONG else "differential")
    return settings(profile, max_examples=count * LONG_FACTOR if LONG else count)


def sentinel(dtype: np.dtype):
    """A value no drawn file is likely to hold where it matters: what a destination holds before a read."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.iinfo(dtype).max - 3
    return dtype.type(-7777.5)


def filled(shape, dtype) -> np.ndarray:
    """A destination of `shape` holding the sentinel of `dtype`."""
    return np.full(shape, sentinel(dtype), dtype=dtype)


def crop(image: np.ndarray, centre, shape, out: np.ndarray) -> None:
    """Copy into `out` (of `shape`) the part of `image` a patch centred at `centre` covers."""
    target, source = [], []
    for c, n, size in zip(centre, shape, image.shape):
        start = c - n // 2
        first, last = max(start, 0), min(start + n, size)
        if last <= first:
            return
        target.append(slice(first - start, last - start))
        source.append(slice(first, last))
    out[tuple(target)] = image[tuple(source)]


def cropped(images: np.ndarray, slots, centres, out: np.ndarray) -> np.ndarray:
    """`out` given patch `i` around `centres[i]` of image `slots[i]` of `images`, where it covers it."""
    for k, (slot, centre) in enumerate(zip(slots, centres)):
        crop(images[slot], centre, out.shape[1:], out[k])
    return out


@st.composite
def batches(draw, count: int, most: int = 12) -> list[int]:
    """Slots of a batch over `count` images: any of them, repeats and any order."""
    return draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=most))


@st.composite
def patches(draw, image_shape, most: int = 8) -> tuple[tuple[int, ...], np.ndarray]:
    """A patch shape (up to the image's extent and a few beyond) and centres on the image, near it and
    past its edge, repeats included."""
    shape = tuple(draw(st.integers(1, n + 3)) for n in image_shape)
    centre = st.tuples(*(st.integers(0, n + 2) for n in image_shape))
    centres = draw(st.lists(centre, min_size=1, max_size=most))
    return shape, np.array(centres, dtype=np.int64).reshape(len(centres), len(image_shape))


def destination_type(drawn: Drawn, draw) -> np.dtype:
    """The file's own type, or a wider one the values convert to where they land."""
    own = drawn.values.dtype
    return np.dtype(draw(st.sampled_from([own, np.complex128 if own.kind == "c" else np.float64])))


def describe(drawn: Drawn, **what) -> str:
    """A failure message: the file's layout and what was read of it."""
    return f"{drawn.layout}; " + ", ".join(f"{name} {value}" for name, value in what.items())


def read_every_way(data, drawn: Drawn, key: str, loader, options: dict | None = None) -> None:
    """Read `drawn` at `key` through `loader` every way the core reads (whole, an image of a stack, a
    batch, an indexed batch, patches of one image, patches of many) and compare each with numpy's."""
    extra = {} if options is None else {"storage_options": options}
    images = drawn.images
    np.testing.assert_array_equal(vio.read(key, **extra), drawn.values, err_msg=drawn.layout)
    with open_reader(key, **extra) as reader:  # what a shape check is told, a reader made or not
        assert vio.query_descriptor(key, **extra) == reader.descriptor, drawn.layout
    count = len(images)
    locate = (lambda i: vio.ImageLocation(key, i)) if drawn.stack else (lambda i: key)
    if drawn.stack:
        i = data.draw(st.integers(0, count - 1), label="image")
        one = vio.read(vio.ImageLocation(key, i), **extra)
        np.testing.assert_array_equal(one, images[i], err_msg=describe(drawn, image=i))

    dtype = destination_type(drawn, data.draw)
    # Into every other column of a buffer: a read lands in a strided view where it is, and nowhere else.
    buffer = filled((*images.shape[1:-1], 2 * images.shape[-1]), dtype)
    vio.read(locate(count - 1), out=buffer[..., 1::2], **extra)
    expected = filled(buffer.shape, dtype)
    expected[..., 1::2] = images[-1]
    np.testing.assert_array_equal(buffer, expected, err_msg=describe(drawn, out="every other column"))

    slots = data.draw(batches(count), label="batch")
    spread = data.draw(st.sampled_from([1, 2]), label="a slot every")  # into every slot, or every other
    buffer = filled((spread * len(slots), *images.shape[1:]), dtype)
    vio.read_batch_async(loader, buffer[::spread], [locate(i) for i in slots]).get()
    expected = filled(buffer.shape, dtype)
    expected[::spread] = images[slots]
    np.testing.assert_array_equal(buffer, expected, err_msg=describe(drawn, batch=slots, spread=spread))

    slots = data.draw(batches(count), label="indexed batch")
    out = filled((len(slots), *images.shape[1:]), dtype)
    indices = np.array(slots) if drawn.stack else np.full(len(slots), -1)
    vio.read_indexed_async(loader, out, [key], np.zeros(len(slots), np.int64), indices).get()
    np.testing.assert_array_equal(out, images[slots], err_msg=describe(drawn, indexed=slots))

    image = data.draw(st.integers(0, count - 1), label="patched image")
    shape, centres = data.draw(patches(images.shape[1:]), label="patches")
    out = filled((len(centres), *shape), dtype)
    vio.read_patches_async(loader, out, locate(image), centres).get()
    expected = cropped(images, [image] * len(centres), centres, filled(out.shape, dtype))
    message = describe(drawn, image=image, centres=centres.tolist())
    np.testing.assert_array_equal(out, expected, err_msg=message)

    shape, centres = data.draw(patches(images.shape[1:]), label="patches of many images")
    slots = data.draw(st.lists(st.integers(0, count - 1), min_size=len(centres), max_size=len(centres)))
    pairs = [(key, i if drawn.stack else -1) for i in sorted(set(slots))]
    ids = np.array([sorted(set(slots)).index(i) for i in slots], np.int64)
    out = filled((len(centres), *shape), dtype)
    fill = data.draw(st.sampled_from([None, 0]), label="fill")
    vio.read_patches_indexed_async(loader, out, pairs, ids, centres, fill=fill).get()
    before = filled(out.shape, dtype) if fill is None else np.zeros_like(out)
    expected = cropped(images, slots, centres, before)
    np.testing.assert_array_equal(
        out, expected, err_msg=describe(drawn, images=slots, centres=centres.tolist(), fill=fill)
    )
