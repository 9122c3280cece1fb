"""Files, local and at URLs, read as `vitrio.dask` arrays (the whole file, images at locations,
patches), computed by dask's synchronous and threaded schedulers, against numpy's reads of their bytes."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import vitrio as vio
import vitrio.dask as vd

from .files import mrc_files, tiff_files
from .reads import batches, cropped, describe, examples, patches
from .urls import served


@examples(20)
@given(data=st.data())
def test_dask_arrays_hold_the_files_bytes(folder, s3, http, data):
    drawn = data.draw(st.one_of(mrc_files(folder), tiff_files(folder)), label="file")
    place = data.draw(st.sampled_from(["local", "local", "s3", "http"]), label="served from")
    key, options = served(drawn, place, s3, http)
    images = drawn.images
    scheduler = data.draw(st.sampled_from(["synchronous", "threads"]), label="scheduler")
    chunk = data.draw(st.sampled_from([None, 1, 2, 3]), label="chunk")
    whole = vd.from_file(key, chunk=chunk, storage_options=options).compute(scheduler=scheduler)
    np.testing.assert_array_equal(
        whole, drawn.values.reshape(whole.shape), err_msg=describe(drawn, chunk=chunk)
    )

    slots = data.draw(batches(len(images)), label="slots")
    locations = [vio.ImageLocation(key, i) if drawn.stack else key for i in slots]
    read = vd.from_locations(locations, chunk=chunk, storage_options=options).compute(scheduler=scheduler)
    np.testing.assert_array_equal(read, images[slots], err_msg=describe(drawn, slots=slots, chunk=chunk))
    if not drawn.stack and drawn.values.ndim == 3:  # an index into one volume names one of its sections
        sections = data.draw(batches(len(drawn.values)), label="sections")
        read = vd.from_locations(
            [vio.ImageLocation(key, z) for z in sections], chunk=chunk, storage_options=options
        )
        expected = drawn.values[sections]
        np.testing.assert_array_equal(
            read.compute(scheduler=scheduler), expected, err_msg=describe(drawn, z=sections)
        )

    shape, centres = data.draw(patches(images.shape[1:]), label="patches")
    slots = data.draw(st.lists(st.integers(0, len(images) - 1), min_size=len(centres), max_size=len(centres)))
    fill = data.draw(st.sampled_from([0, 3]), label="fill")
    locations = [vio.ImageLocation(key, i) if drawn.stack else key for i in slots]
    read = vd.from_patches(
        locations, centres, shape, chunk=chunk, fill=fill, storage_options=options
    ).compute(scheduler=scheduler)
    expected = cropped(images, slots, centres, np.full((len(centres), *shape), fill, images.dtype))
    message = describe(drawn, images=slots, centres=centres.tolist(), fill=fill, chunk=chunk)
    np.testing.assert_array_equal(read, expected, err_msg=message)
