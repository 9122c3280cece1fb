"""read_batch_async: many files and formats in one batch, type conversion, any destination, errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tifffile
import torch

import vitrio as vio

from .helpers import mrc_header, write_mrc_by_hand

H, W = 6, 5


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Stacks of (H, W) images in several formats and types, and what they hold."""
    directory = tmp_path_factory.mktemp("batch")
    rng = np.random.default_rng(7)
    made = {}

    def keep(name, values):
        made[str(directory / name)] = values

    values = rng.normal(size=(5, H, W)).astype(np.float32)
    vio.write_stack(values, directory / "a.mrcs")
    keep("a.mrcs", values)
    values = rng.integers(-1000, 1000, size=(4, H, W)).astype(np.int16)
    write_mrc_by_hand(directory / "b.mrcs", values, 1, order=">")  # big-endian int16
    keep("b.mrcs", values)
    values = rng.normal(size=(3, H, W)).astype(np.float16)
    vio.write_stack(values, directory / "c.mrcs")
    keep("c.mrcs", values)
    values = rng.integers(0, 60000, size=(6, H, W)).astype(np.uint16)
    tifffile.imwrite(directory / "d.tif", values, photometric="minisblack")
    keep("d.tif", values)
    values = rng.normal(size=(4, H, W)).astype(np.float32)
    tifffile.imwrite(directory / "e.tif", values, photometric="minisblack", compression="zlib")
    keep("e.tif", values)
    return made


def _all_locations(files):
    return [vio.ImageLocation(key, i) for key, values in files.items() for i in range(len(values))]


def _expected(files, locations, dtype):
    return np.stack([files[loc.key][loc.index_in_stack].astype(dtype) for loc in locations])


@pytest.mark.parametrize("workers", [1, 3])
def test_batch_across_files_and_formats(files, rng, workers):
    locations = _all_locations(files)
    order = rng.permutation(len(locations))
    locations = [locations[i] for i in order]
    destination = np.full((len(locations), H, W), np.nan, dtype=np.float32)
    completion = vio.read_batch_async(vio.loader(workers=workers), destination, locations)
    assert isinstance(completion, vio.Completion)
    completion.get()
    assert completion.is_ready
    np.testing.assert_array_equal(destination, _expected(files, locations, np.float32))


def test_batch_converts_types(files):
    locations = _all_locations(files)
    loader = vio.loader(workers=2)
    for dtype in (np.float64, np.float32, np.complex64):
        destination = np.zeros((len(locations), H, W), dtype=dtype)
        vio.read_batch_async(loader, destination, locations).get()
        np.testing.assert_array_equal(destination, _expected(files, locations, dtype))


def test_batch_of_repeated_and_reversed_locations(files):
    key = next(k for k in files if k.endswith("a.mrcs"))
    locations = [vio.ImageLocation(key, i) for i in (4, 3, 3, 0, 4, 1, 2, 2)]
    destination = np.zeros((len(locations), H, W), np.float32)
    vio.read_batch_async(vio.loader(workers=2), destination, locations).get()
    np.testing.assert_array_equal(destination, _expected(files, locations, np.float32))


def test_torch_destination_is_filled_where_it_is(files):
    locations = _all_locations(files)[::-1]
    tensor = torch.full((len(locations), H, W), -1.0)
    pointer = tensor.data_ptr()
    vio.read_batch_async(vio.loader(workers=2), tensor, locations).get()
    assert tensor.data_ptr() == pointer
    np.testing.assert_array_equal(tensor.numpy(), _expected(files, locations, np.float32))
    doubles = torch.zeros((len(locations), H, W), dtype=torch.float64)
    vio.read_batch_async(vio.loader(workers=2), doubles, locations).get()
    np.testing.assert_array_equal(doubles.numpy(), _expected(files, locations, np.float64))


def test_torch_view_destination(files):
    locations = _all_locations(files)[:6]
    big = torch.zeros((6, H, 2 * W))
    vio.read_batch_async(vio.loader(workers=2), big[:, :, ::2], locations).get()
    np.testing.assert_array_equal(big[:, :, ::2].numpy(), _expected(files, locations, np.float32))
    assert (big[:, :, 1::2] == 0).all()


def test_memoryview_destination(files):
    locations = _all_locations(files)[:7]
    buffer = bytearray(7 * H * W * 4)
    array = np.frombuffer(buffer, dtype=np.float32).reshape(7, H, W)
    vio.read_batch_async(vio.loader(workers=2), memoryview(array), locations).get()
    np.testing.assert_array_equal(array, _expected(files, locations, np.float32))
    raw = bytearray(7 * H * W * 8)
    view = memoryview(raw).cast("d", (7, H, W))
    vio.read_batch_async(vio.loader(workers=2), view, locations).get()
    np.testing.assert_array_equal(
        np.frombuffer(raw, np.float64).reshape(7, H, W), _expected(files, locations, np.float64)
    )


def test_strided_and_transposed_destinations(files, rng):
    locations = _all_locations(files)
    n = len(locations)
    expected = _expected(files, locations, np.float32)
    big = np.full((n, 2 * H, W + 3), -5.0, dtype=np.float32)
    vio.read_batch_async(vio.loader(workers=2), big[:, ::2, 1 : W + 1], locations).get()
    np.testing.assert_array_equal(big[:, ::2, 1 : W + 1], expected)
    assert (big[:, 1::2] == -5).all() and (big[:, :, 0] == -5).all() and (big[:, :, W + 1 :] == -5).all()
    slots_last = np.zeros((H, W, n), dtype=np.float32)  # slot i is slots_last[..., i]
    vio.read_batch_async(vio.loader(workers=2), slots_last.transpose(2, 0, 1), locations).get()
    np.testing.assert_array_equal(slots_last.transpose(2, 0, 1), expected)
    every_other = np.zeros((2 * n, H, W), dtype=np.float64)
    vio.read_batch_async(vio.loader(workers=2), every_other[1::2], locations).get()
    np.testing.assert_array_equal(every_other[1::2], expected)
    assert (every_other[::2] == 0).all()


def test_whole_files_in_a_batch(tmp_path, rng):
    stacks = [rng.normal(size=(3, 4, 5)).astype(np.float32) for _ in range(4)]
    keys = []
    for i, stack in enumerate(stacks):
        path = tmp_path / f"s{i}.{'mrcs' if i % 2 else 'tif'}"
        vio.write_stack(stack, path)
        keys.append(path if i % 2 else str(path))
    destination = np.zeros((4, 3, 4, 5), np.float64)
    vio.read_batch_async(vio.loader(workers=2), destination, keys[::-1]).get()
    np.testing.assert_array_equal(destination, np.stack(stacks[::-1]))
    whole = [vio.ImageLocation(key) for key in keys]
    vio.read_batch_async(vio.loader(workers=2), destination, whole).get()
    np.testing.assert_array_equal(destination, np.stack(stacks))


def test_empty_batch(files):
    completion = vio.read_batch_async(vio.loader(workers=2), np.zeros((0, H, W), np.float32), [])
    assert completion.is_ready
    completion.get()


def test_errors_at_the_call(files):
    locations = _all_locations(files)[:3]
    loader = vio.loader(workers=2)
    with pytest.raises(
        ValueError, match=r"leading extent must be the number of locations, 3: its shape is \(4, 6, 5\)"
    ):
        vio.read_batch_async(loader, np.zeros((4, H, W), np.float32), locations)
    with pytest.raises(
        ValueError, match=r"leading extent must be the number of locations, 3: its shape is \(2, 6, 5\)"
    ):
        vio.read_batch_async(loader, np.zeros((2, H, W), np.float32), locations)
    with pytest.raises(
        ValueError, match=r"leading extent must be the number of locations, 0: its shape is \(\)"
    ):
        vio.read_batch_async(loader, np.zeros((), np.float32), [])
    key = locations[0].key
    with pytest.raises(ValueError, match="locations mix whole files and images of stacks"):
        vio.read_batch_async(loader, np.zeros((2, H, W), np.float32), [vio.ImageLocation(key, 0), key])
    with pytest.raises(ValueError, match="locations mix whole files and images of stacks"):
        vio.read_batch_async(loader, np.zeros((2, H, W), np.float32), [vio.ImageLocation(key), locations[1]])
    read_only = np.zeros((3, H, W), np.float32)
    read_only.setflags(write=False)
    with pytest.raises(ValueError, match="the destination is read only"):
        vio.read_batch_async(loader, read_only, locations)
    with pytest.raises(TypeError, match="buffer protocol or DLPack, not object"):
        vio.read_batch_async(loader, object(), locations)


def test_index_past_the_end_names_the_file(files):
    key = next(k for k in files if k.endswith("c.mrcs"))
    other = next(k for k in files if k.endswith("a.mrcs"))
    locations = [vio.ImageLocation(other, 0), vio.ImageLocation(key, 3), vio.ImageLocation(other, 1)]
    destination = np.zeros((3, H, W), np.float32)
    completion = vio.read_batch_async(vio.loader(workers=2), destination, locations)
    completion.wait()  # raises nothing
    with pytest.raises(IndexError, match=r"c\.mrcs: index 3 is past the end of a stack of 3"):
        completion.get()
    np.testing.assert_array_equal(destination[0], files[other][0])


def test_missing_file_names_it(tmp_path, files):
    locations = [vio.ImageLocation(tmp_path / "gone.mrcs", 0), _all_locations(files)[0]]
    completion = vio.read_batch_async(vio.loader(workers=2), np.zeros((2, H, W), np.float32), locations)
    with pytest.raises(FileNotFoundError, match="gone.mrcs"):
        completion.get()


@pytest.mark.parametrize("extension", [".mrcs", ".tif"])
def test_truncated_file_names_it(tmp_path, rng, extension):
    path = tmp_path / ("cut" + extension)
    vio.write_stack(rng.normal(size=(4, 32, 32)).astype(np.float32), path)
    with open(path, "r+b") as file:
        file.truncate(int(os.path.getsize(path) * 0.6))  # into the data of image 2
    locations = [vio.ImageLocation(path, 3)]
    completion = vio.read_batch_async(vio.loader(workers=1), np.zeros((1, 32, 32), np.float32), locations)
    with pytest.raises(ValueError, match="cut"):
        completion.get()


def test_slot_shape_that_does_not_fit_names_the_file(files):
    locations = _all_locations(files)[:2]
    completion = vio.read_batch_async(vio.loader(workers=2), np.zeros((2, W, H), np.float32), locations)
    with pytest.raises(ValueError, match="a.mrcs"):
        completion.get()


def test_header_claiming_a_huge_size_is_refused(tmp_path):
    """Refused before anything is allocated (the next test measures that); a hang meets the timeout."""
    path = tmp_path / "huge.mrc"
    path.write_bytes(mrc_header(2**20, 2**20, 2**20, 2, ispg=1) + bytes(4096))
    with pytest.raises(ValueError, match="huge.mrc"):
        vio.read(path)
    completion = vio.read_batch_async(vio.loader(workers=1), np.zeros((1, 4, 4), np.float32), [path])
    with pytest.raises(ValueError, match="huge.mrc"):
        completion.get()
    patches = np.zeros((1, 4, 4, 4), np.float32)
    completion = vio.read_patches_async(vio.loader(workers=1), patches, path, [[5, 5, 5]])
    with pytest.raises(ValueError, match="huge.mrc"):
        completion.get()


def test_header_claiming_a_huge_size_allocates_nothing(tmp_path):
    path = tmp_path / "huge.mrcs"
    path.write_bytes(mrc_header(2**20, 2**20, 2**20, 2) + bytes(4096))
    script = textwrap.dedent(
        f"""
        import resource, numpy as np, vitrio as vio
        limit = 2 << 30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for call in (
            lambda: vio.read({str(path)!r}),
            lambda: vio.query_descriptor({str(path)!r}),
            lambda: vio.read(vio.ImageLocation({str(path)!r}, 5)),
            lambda: vio.read_batch_async(
                vio.loader(workers=1), np.zeros((1, 4, 4), np.float32), [vio.ImageLocation({str(path)!r}, 0)]
            ).get(),
        ):
            try:
                call()
            except MemoryError:
                raise SystemExit("allocated what the header claims")
            except ValueError as error:
                assert "huge.mrcs" in str(error), error
            else:
                raise SystemExit("read a file that is not there")
        print("refused")
        """
    )
    environment = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=environment
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "refused" in result.stdout


def test_truncated_compressed_tiff_names_it(tmp_path, rng):
    path = tmp_path / "cutz.tif"
    values = rng.normal(size=(4, 32, 32)).astype(np.float32)
    tifffile.imwrite(path, values, photometric="minisblack", compression="zlib")
    with tifffile.TiffFile(path) as tif:
        end_of_image_2 = tif.pages[2].dataoffsets[0] + tif.pages[2].databytecounts[0]
    with open(path, "r+b") as file:
        file.truncate(end_of_image_2 - 100)
    for index in (2, 3):
        completion = vio.read_batch_async(
            vio.loader(workers=1), np.zeros((1, 32, 32), np.float32), [vio.ImageLocation(path, index)]
        )
        with pytest.raises((ValueError, IndexError, OSError), match="cutz.tif"):
            completion.get()


def test_file_truncated_under_a_cached_reader_raises_and_never_crashes(tmp_path):
    """Run apart: a read past the end of a mapped file would kill the interpreter with SIGBUS."""
    path = tmp_path / "shrinks.mrcs"
    vio.write_stack(np.ones((8, 64, 64), np.float32), path)
    script = textwrap.dedent(
        f"""
        import os, numpy as np, vitrio as vio
        loader = vio.loader(workers=2, cache=2)
        path = {str(path)!r}
        locations = [vio.ImageLocation(path, i) for i in range(8)]
        vio.read_batch_async(loader, np.zeros((8, 64, 64), np.float32), locations).get()
        os.truncate(path, 1024 + 3 * 64 * 64 * 4)
        for destination in (np.zeros((8, 64, 64), np.float32), np.zeros((8, 64, 64), np.float64)):
            try:
                vio.read_batch_async(loader, destination, locations).get()
            except (OSError, ValueError) as error:
                assert "shrinks.mrcs" in str(error), error
            else:
                raise SystemExit("read past the end of the file")
        patches = np.zeros((1, 8, 8), np.float32)
        try:
            vio.read_patches_async(loader, patches, locations[7], [[60, 60]]).get()
        except (OSError, ValueError) as error:
            assert "shrinks.mrcs" in str(error), error
        else:
            raise SystemExit("cropped past the end of the file")
        print("refused")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (result.returncode, result.stderr + result.stdout)
    assert "refused" in result.stdout
