"""Particles cropped by `vitrio.extract` out of drawn micrographs (MRC and TIFF), read back by mrcfile,
against numpy's crops of the micrographs' bytes: the centre at `box // 2`, zero beyond the edge."""

from __future__ import annotations

import mrcfile
import numpy as np
import pandas as pd
import starfile
from hypothesis import given
from hypothesis import strategies as st

import vitrio as vio
from vitrio.extract import extract_particles

from .files import FLOAT32_MODES, FLOAT32_TYPES, fresh, mrc_files, tiff_files
from .reads import crop, examples


@examples(12)
@given(data=st.data())
def test_extracted_particles_are_numpys_crops_of_the_micrographs(folder, data):
    side = st.integers(4, 24)
    shape = data.draw(st.tuples(side, side), label="micrograph shape")
    mrc = mrc_files(folder, kinds=("image",), modes=FLOAT32_MODES, shape=shape)
    tiff = tiff_files(folder, shape=shape, types=FLOAT32_TYPES, pages=(1, 1))
    micrographs = data.draw(st.lists(st.one_of(mrc, tiff), min_size=1, max_size=3), label="micrographs")
    box = data.draw(st.integers(1, min(shape)), label="box")
    near = st.sampled_from([0.0, 0.3, -0.3])  # rounded to the pixel
    picks = data.draw(
        st.lists(
            st.tuples(
                st.integers(0, len(micrographs) - 1),
                st.integers(0, shape[0] - 1),
                st.integers(0, shape[1] - 1),
                near,
                near,
            ),
            min_size=1,
            max_size=12,
        ),
        label="picks (micrograph, y, x, and fractions)",
    )
    project = fresh(folder, "extract")
    project.mkdir()
    names = [m.path.name for m in micrographs]
    starfile.write({"micrographs": pd.DataFrame({"rlnMicrographName": names})}, project / "micrographs.star")
    coordinates = pd.DataFrame(
        {
            "rlnMicrographName": [names[m] for m, *_ in picks],
            "rlnCoordinateX": [max(0.0, x + dx) for _, _, x, _, dx in picks],
            "rlnCoordinateY": [max(0.0, y + dy) for _, y, _, dy, _ in picks],
        }
    )
    starfile.write(coordinates, project / "coordinates.star")
    done = extract_particles(
        project / "micrographs.star",
        project / "coordinates.star",
        box,
        project / "particles.star",
        root=folder,
        pixel_size=1.0,
        threads=data.draw(st.integers(1, 3), label="threads"),
    )
    for (m, y, x, _, _), name in zip(picks, done.particles["rlnImageName"]):
        location = vio.ImageLocation.from_string(name)
        with mrcfile.open(folder / location.key, permissive=True) as stack:
            particle = stack.data[location.index_in_stack] if stack.data.ndim == 3 else stack.data
        expected = np.zeros((box, box), np.float32)
        crop(micrographs[m].values.astype(np.float32), (y, x), (box, box), expected)
        np.testing.assert_array_equal(
            particle, expected, err_msg=f"{micrographs[m].layout}; box {box} at {y}, {x}"
        )
