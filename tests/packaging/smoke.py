"""What a user does first, run by the interpreter of a fresh virtual environment the wheel was installed
into (with its `star` extra), where no C compiler can be reached: read an MRC stack, a batch of it into
float32, an EER frame, and the particles of a STAR file. Prints `ok`."""

import shutil
import sys
from pathlib import Path

import numpy as np

import vitrio as vio
from vitrio import _native
from vitrio.data import particle_locations, read_particles
from vitrio.testing.eer import random_movie

assert shutil.which("cc") is None and shutil.which("gcc") is None, "a compiler is reachable"
native = Path(_native.__file__)
assert native.name == "_native.abi3.so" and native.is_relative_to(sys.prefix), native

stack = np.arange(5 * 8 * 8, dtype=np.int16).reshape(5, 8, 8)
vio.write_stack(stack, "stack.mrcs")
assert np.array_equal(vio.read("stack.mrcs"), stack)

batch = np.full((3, 8, 8), np.nan, np.float32)
locations = [vio.ImageLocation("stack.mrcs", i) for i in (4, 0, 2)]
vio.read_batch_async(vio.loader(workers=2), batch, locations).get()
assert np.array_equal(batch, stack[[4, 0, 2]].astype(np.float32))

movie = random_movie(Path("movie.eer"), frames=3, shape=(32, 32))
assert np.array_equal(vio.read(vio.ImageLocation("movie.eer", 1)), movie.counts()[1])

Path("particles.star").write_text(
    "data_particles\n\nloop_\n_rlnImageName #1\n_rlnDefocusU #2\n"
    "000002@stack.mrcs 10000.0\n000005@stack.mrcs 12000.0\n"
)
particles = read_particles("particles.star")
images = np.stack([vio.read(location) for location in particle_locations(particles, "particles.star")])
assert np.array_equal(images, stack[[1, 4]]) and particles["rlnDefocusU"].tolist() == [10000.0, 12000.0]
print("ok")
