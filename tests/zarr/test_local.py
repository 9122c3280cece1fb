"""OME-Zarr stores on disk: key spellings and levels, voxel sizes from NGFF metadata, what other programs
read of our stores and we of theirs, the writer's options and failures, and the chunk cache."""

from __future__ import annotations

import json
import os
import threading

import mrcfile
import numpy as np
import pytest
import zarr
from hypothesis import example, given
from hypothesis import strategies as st
from ome_zarr.io import parse_url
from ome_zarr.reader import Reader
from ome_zarr.writer import write_image
from ome_zarr_models.v04.image import Image

import vitrio as vio
import vitrio.formats.zarr
from vitrio._config import configuration, configure
from vitrio.formats.zarr import ChunkCache, OmeZarrFormat, _keys, parse_key

from .conftest import CHUNKS, SHAPE

pytestmark = pytest.mark.filterwarnings("ignore:Call to deprecated class Scaler:DeprecationWarning")


def binned(values: np.ndarray, times: int) -> np.ndarray:
    """Level `times` as the writer makes it: `times` rounds of 2x averaging, odd extents edge-padded."""
    for _ in range(times):
        padded = np.pad(values, [(0, n % 2) for n in values.shape], mode="edge")
        shape = [x for n in padded.shape for x in (n // 2, 2)]
        values = padded.reshape(shape).mean(axis=(1, 3, 5), dtype=values.dtype)
    return values


# ---------------------------------------------------------------- keys and levels


def test_key_spellings():
    assert parse_key("tomo.zarr") == ("tomo.zarr", None, False)
    assert parse_key("tomo.zarr#2") == ("tomo.zarr", 2, False)
    assert parse_key("tomo.zarr#scale=1") == ("tomo.zarr", 1, False)
    assert parse_key("s3://bucket/run/tomo.zarr/#1") == ("s3://bucket/run/tomo.zarr", 1, True)
    assert parse_key("file:///data/tomo.zarr") == ("/data/tomo.zarr", None, False)
    with pytest.raises(ValueError, match="#x"):
        parse_key("tomo.zarr#x")


def test_a_store_is_told_by_its_name_or_its_metadata(tmp_path):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    vio.write_single(values, tmp_path / "a.zarr")
    os.rename(tmp_path / "a.zarr", tmp_path / "store")
    np.testing.assert_array_equal(vio.read(tmp_path / "store"), values)
    vio.write_single(values, tmp_path / "plain.mrc")
    os.rename(tmp_path / "plain.mrc", tmp_path / "plain")  # a file without an extension is no store
    np.testing.assert_array_equal(vio.read(tmp_path / "plain"), values)
    assert not OmeZarrFormat.claims_key(str(tmp_path / "plain")) and not OmeZarrFormat.claims_key("a.mrc#2")
    assert OmeZarrFormat.claims_key("https://host/data/run") and OmeZarrFormat.claims_key("x.ZARR#1")


@given(
    st.lists(
        st.sampled_from(["a", ".", "/", "#", "1", "#2", ".zarr", ".ZARR", ".mrcs", "s3://", "file://", "\\"]),
        max_size=6,
    ).map("".join)
)
@example("s3://host/run#1.5")  # a URL without an extension, and a mark that names no level
def test_a_key_with_an_extension_is_told_from_a_store_as_the_whole_rule_tells_it(key):
    """`names_store` answers a key with an extension, no `#` and no `.zarr` at once: as parsing it does."""
    try:
        parsed = _keys._names_local(parse_key(key).store)
    except ValueError:
        parsed = "#" in key and _keys._names_local(key.rpartition("#")[0])
    assert _keys.names_store(key) == parsed


def test_levels_by_key_and_by_option(tomogram):
    path, values = tomogram
    for level in range(3):
        expected = binned(values, level)
        key = f"{path}#{level}"
        assert vio.query_descriptor(key) == vio.ImageDescriptor(expected.shape, 3, "float32")
        np.testing.assert_allclose(vio.read(key), expected, rtol=1e-5, atol=1e-6)
    coarse = vio.reader_provider(formats=[OmeZarrFormat.configured(level=2)])
    assert vio.query_descriptor(path, coarse).extents == binned(values, 2).shape
    assert vio.query_descriptor(f"{path}#scale=1", coarse).extents == binned(values, 1).shape
    with pytest.raises(vio.FormatError, match="levels 0 to 2, not 3"):
        vio.read(f"{path}#3")
    with pytest.raises(vio.FormatError, match="names no scale level"):
        vio.read(f"{path}#coarse")


def test_voxel_size_in_angstroms_from_each_level(tomogram):
    path, _ = tomogram
    for level, size in enumerate((7.84, 15.68, 31.36)):
        reader = vio.formats.open_reader(f"{path}#{level}")
        try:
            assert reader.format_name == "ome-zarr"
            np.testing.assert_allclose(reader.voxel_size, (size,) * 3)
            assert reader.header_statistics is None
        finally:
            reader.close()


def test_units_and_transformations_of_other_writers(tmp_path):
    """Portal-style metadata: nanometres, a scale of the multiscale itself, translations ignored."""
    values = np.arange(4 * 6 * 8, dtype=np.uint8).reshape(4, 6, 8)
    group = zarr.open_group(str(tmp_path / "nm.zarr"), mode="w", zarr_format=2)
    group.create_array("a", data=values, chunks=(2, 3, 4))
    axes = [{"name": n, "type": "space", "unit": "nanometer"} for n in "zyx"]
    dataset = {
        "path": "a",
        "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 2.0, 3.0]},
            {"type": "translation", "translation": [5.0, 5.0, 5.0]},
        ],
    }
    overall = [{"type": "scale", "scale": [0.5, 0.5, 0.5]}]
    group.attrs["multiscales"] = [
        {"version": "0.4", "axes": axes, "datasets": [dataset], "coordinateTransformations": overall}
    ]
    reader = vio.formats.open_reader(tmp_path / "nm.zarr")
    try:
        assert reader.voxel_size == (5.0, 10.0, 15.0)
    finally:
        reader.close()
    np.testing.assert_array_equal(vio.read(tmp_path / "nm.zarr"), values)
    group.attrs["multiscales"] = [{"version": "0.4", "axes": ["z", "y", "x"], "datasets": [{"path": "a"}]}]
    reader = vio.formats.open_reader(tmp_path / "nm.zarr")
    try:
        assert reader.voxel_size is None  # axes without a unit give no length
    finally:
        reader.close()


# ---------------------------------------------------------------- other programs


def test_ome_zarr_and_zarr_read_our_stores_equal(tomogram):
    path, values = tomogram
    image = Image.from_zarr(zarr.open_group(str(path), mode="r"))  # validates the NGFF 0.4 metadata
    assert [axis.unit for axis in image.attributes.multiscales[0].axes] == ["angstrom"] * 3
    node = next(iter(Reader(parse_url(str(path)))()))
    assert len(node.data) == 3
    for level, data in enumerate(node.data):
        np.testing.assert_array_equal(np.asarray(data), vio.read(f"{path}#{level}"))
    np.testing.assert_array_equal(zarr.open_array(str(path / "0"), mode="r")[:], values)
    scales = [level[0]["scale"] for level in node.metadata["coordinateTransformations"]]
    assert scales == [[7.84] * 3, [15.68] * 3, [31.36] * 3]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_we_read_what_ome_zarr_writes(tmp_path, zarr_format):
    values = np.random.default_rng(1).integers(0, 1000, size=(2, 20, 33, 45)).astype(np.uint16)
    group = zarr.open_group(str(tmp_path / "o.zarr"), mode="w", zarr_format=zarr_format)
    write_image(values, group, axes="czyx", storage_options={"chunks": (1, 8, 8, 8)})
    descriptor = vio.query_descriptor(tmp_path / "o.zarr")
    assert descriptor == vio.ImageDescriptor(values.shape, 3, "uint16")
    np.testing.assert_array_equal(vio.read(tmp_path / "o.zarr"), values)
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "o.zarr", 1)), values[1])
    coarse = zarr.open_array(str(tmp_path / "o.zarr" / "s1"), mode="r")[:]
    np.testing.assert_array_equal(vio.read(f"{tmp_path / 'o.zarr'}#1"), coarse)


def test_labels_are_sampled_not_averaged(tmp_path):
    labels = np.random.default_rng(2).integers(0, 4, size=(9, 14, 11)).astype(np.uint8)
    vio.write_single(labels, tmp_path / "labels.zarr", formats=[OmeZarrFormat.configured(levels=3)])
    np.testing.assert_array_equal(vio.read(f"{tmp_path / 'labels.zarr'}#1"), labels[::2, ::2, ::2])
    np.testing.assert_array_equal(vio.read(f"{tmp_path / 'labels.zarr'}#2"), labels[::4, ::4, ::4])


# ---------------------------------------------------------------- the writer


def test_writer_options(tmp_path):
    values = np.random.default_rng(3).random((10, 30, 20)).astype(np.float32)
    written = OmeZarrFormat.configured(levels=2, chunks=(5, 10, 7), codec="gzip", voxel_size=(2.0, 1.0, 1.0))
    vio.write_single(values, tmp_path / "g.zarr", formats=[written])
    metadata = json.loads((tmp_path / "g.zarr" / "0" / ".zarray").read_text())
    assert metadata["chunks"] == [5, 10, 7] and metadata["compressor"]["id"] == "gzip"
    assert sorted(os.listdir(tmp_path / "g.zarr")) == [".zattrs", ".zgroup", "0", "1"]
    np.testing.assert_array_equal(vio.read(tmp_path / "g.zarr"), values)
    reader = vio.formats.open_reader(f"{tmp_path / 'g.zarr'}#1")
    try:
        assert reader.voxel_size == (4.0, 2.0, 2.0)
    finally:
        reader.close()
    with pytest.raises(ValueError, match="codec"):
        OmeZarrFormat.configured(codec="lzma")
    movies = np.random.default_rng(6).random((2, 3, 9, 8)).astype(np.float32)  # time, channel, y, x
    vio.write(movies, tmp_path / "tc.zarr", vio.ImageDescriptor(movies.shape, 2, "float32"))
    image = Image.from_zarr(zarr.open_group(str(tmp_path / "tc.zarr"), mode="r"))
    kinds = [axis.type for axis in image.attributes.multiscales[0].axes]
    assert kinds == ["time", "channel", "space", "space"]
    assert vio.query_descriptor(tmp_path / "tc.zarr") == vio.ImageDescriptor(movies.shape, 2, "float32")
    np.testing.assert_array_equal(vio.read(vio.ImageLocation(tmp_path / "tc.zarr", 4)), movies[1, 1])


def _scales(store) -> list[list[float]]:
    """The scale of each level of `store` as ome-zarr reads it, after ome-zarr-models validated it."""
    image = Image.from_zarr(zarr.open_group(str(store), mode="r"))
    axes = image.attributes.multiscales[0].axes
    assert {axis.unit for axis in axes if axis.type == "space"} == {"angstrom"}
    node = next(iter(Reader(parse_url(str(store)))()))
    return [level[0]["scale"] for level in node.metadata["coordinateTransformations"]]


def test_the_voxel_size_a_write_is_given_wins_over_the_formats(tmp_path):
    volume = np.random.default_rng(4).random((8, 12, 16)).astype(np.float32)
    three = OmeZarrFormat.configured(levels=3)
    vio.write_single(volume, tmp_path / "t.zarr", voxel_size=(10, 11, 12), formats=[three])
    assert _scales(tmp_path / "t.zarr") == [[10, 11, 12], [20, 22, 24], [40, 44, 48]]
    assert [zarr.open_array(str(tmp_path / "t.zarr" / str(k)), mode="r").shape for k in range(3)] == [
        (8, 12, 16),
        (4, 6, 8),
        (2, 3, 4),
    ]
    defaulted = OmeZarrFormat.configured(levels=2, voxel_size=5.0)
    vio.write_single(volume, tmp_path / "d.zarr", formats=[defaulted])
    vio.write_single(volume, tmp_path / "w.zarr", voxel_size=2.5, formats=[defaulted])
    assert _scales(tmp_path / "d.zarr") == [[5.0] * 3, [10.0] * 3]
    assert _scales(tmp_path / "w.zarr") == [[2.5] * 3, [5.0] * 3]
    # and through the registered format, the batch writer and the command
    with vio.writer_provider() as writers:
        stack = vio.ImageDescriptor((2, 12, 16), 2, "float32")
        writers.declare(tmp_path / "b.zarr", stack, voxel_size=(3, 4))
        locations = [vio.ImageLocation(tmp_path / "b.zarr", i) for i in range(2)]
        vio.write_batch_async(vio.saver(writers, workers=1), volume[:2], locations).get()
    assert _scales(tmp_path / "b.zarr")[0] == [1.0, 3.0, 4.0]
    with mrcfile.new(tmp_path / "t.mrc") as mrc:
        mrc.set_data(volume)
        mrc.voxel_size = (1.5, 2.5, 3.5)  # x, y, z
    from vitrio.cli import main

    assert main(["convert", str(tmp_path / "t.mrc"), str(tmp_path / "c.zarr")]) == 0
    assert _scales(tmp_path / "c.zarr") == [[3.5, 2.5, 1.5], [7.0, 5.0, 3.0], [14.0, 10.0, 6.0]]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "c.zarr" / "0"), mode="r")[:], volume)


def test_a_failed_write_leaves_nothing(tmp_path):
    values = np.zeros((4, 8, 8), np.float32)
    with pytest.raises(ValueError, match="at most 2 axes"), vio.writer_provider() as writers:
        writers.declare(tmp_path / "s.zarr", vio.ImageDescriptor((2, 2, 2, 8, 8), 2, "float32"))
        writers.writer(tmp_path / "s.zarr")
    writers = vio.writer_provider()
    writers.declare(tmp_path / "t.zarr", vio.ImageDescriptor((3, 8, 8), 3, "float32"))
    saver = vio.saver(writers, workers=1)
    with pytest.raises(ValueError):
        vio.write_batch_async(saver, np.zeros((1, 4, 8, 8)), [tmp_path / "t.zarr"]).get()
    writers.discard(tmp_path / "t.zarr")
    (tmp_path / "taken.zarr").mkdir()
    with pytest.raises(FileExistsError, match="taken.zarr"):
        vio.write_single(values, tmp_path / "taken.zarr")
    assert sorted(os.listdir(tmp_path)) == ["taken.zarr"]
    assert os.listdir(tmp_path / "taken.zarr") == []
    with pytest.raises(ValueError, match="local paths"):
        vio.write_single(values, "s3://bucket/x.zarr")


def test_a_store_is_written_from_many_threads(tmp_path):
    values = np.random.default_rng(4).random((12, 2, 9, 10)).astype(np.float32)
    with vio.writer_provider() as writers:
        writers.declare(tmp_path / "m.zarr", vio.ImageDescriptor(values.shape, 3, "float32"))
        locations = [vio.ImageLocation(tmp_path / "m.zarr", i) for i in range(12)]
        vio.write_batch_async(vio.saver(writers, workers=4), values, locations).get()
    np.testing.assert_array_equal(vio.read(tmp_path / "m.zarr"), values)


# ---------------------------------------------------------------- errors


def test_what_is_not_an_ome_zarr_image_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="gone.zarr"):
        vio.read(tmp_path / "gone.zarr")
    plain = zarr.open_group(str(tmp_path / "plain.zarr"), mode="w", zarr_format=2)
    plain.create_array("0", data=np.zeros((4, 4), np.float32))
    with pytest.raises(vio.FormatError, match="plain.zarr.*multiscales"):
        vio.read(tmp_path / "plain.zarr")
    texts = zarr.open_group(str(tmp_path / "text.zarr"), mode="w", zarr_format=3)
    texts.create_array("0", shape=(4, 4), dtype=str)
    texts.attrs["ome"] = {"multiscales": [{"axes": ["y", "x"], "datasets": [{"path": "0"}]}]}
    with pytest.raises(vio.FormatError, match="text.zarr.*vlen-utf8.*not read"):
        vio.read(tmp_path / "text.zarr")
    vio.write_single(np.zeros((8, 8), np.float32), tmp_path / "ok.zarr")
    metadata = tmp_path / "ok.zarr" / "0" / ".zarray"
    text = json.loads(metadata.read_text())
    text["filters"] = [{"id": "pickle"}]
    metadata.write_text(json.dumps(text))
    with pytest.raises(vio.FormatError, match="pickle"):
        vio.read(tmp_path / "ok.zarr")


def test_a_chunk_that_lies_about_its_size_is_refused(tmp_path):
    """A zstd chunk that decodes to far more than a chunk holds is refused before it is decoded."""
    import numcodecs

    vio.write_single(np.ones((8, 8), np.float32), tmp_path / "bomb.zarr", formats=[fresh_format()])
    (tmp_path / "bomb.zarr" / "0" / "0" / "0").write_bytes(numcodecs.Zstd().encode(bytes(1 << 24)))
    with pytest.raises(vio.FormatError, match=r"bomb.zarr: chunk 0/0/0.*16777216"):
        vio.read(tmp_path / "bomb.zarr", readers=vio.reader_provider(formats=[fresh_format()]))


def fresh_format():
    return OmeZarrFormat.configured(cache_bytes=1 << 20, levels=1)


# ---------------------------------------------------------------- the chunk cache


def test_patches_sharing_chunks_decode_each_once(tomogram, monkeypatch):
    path, values = tomogram
    decoded = []
    original = np.frombuffer

    def counting(buffer, *args, **kwargs):
        decoded.append(1)
        return original(buffer, *args, **kwargs)

    monkeypatch.setattr("vitrio.formats.zarr._codecs.np.frombuffer", counting)
    formats = [OmeZarrFormat.configured(cache_bytes=1 << 20)]
    centres = np.array([[8, 8, 8], [7, 9, 8], [9, 8, 7], [8, 7, 9]] * 8)  # all inside chunk (0, 0, 0)
    for _ in range(3):  # the 16 tasks of 4 threads, then two more batches
        out = np.zeros((len(centres), 4, 4, 4), np.float32)
        vio.read_patches_async(vio.loader(workers=4, formats=formats), out, path, centres).get()
        for patch, centre in zip(out, centres):
            z, y, x = centre - 2
            np.testing.assert_array_equal(patch, values[z : z + 4, y : y + 4, x : x + 4])
    assert len(decoded) == 1


def test_the_cache_is_bounded_and_shared_by_concurrent_loads():
    cache = ChunkCache(3 * 800)
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow(keys):
        calls.append(list(keys))
        started.set()
        release.wait(5)
        for k in keys:
            yield k, np.full(100, k, np.float64)

    results = {}
    first = threading.Thread(target=lambda: results.setdefault("a", cache.get_many([1, 2], slow)))
    first.start()
    started.wait(5)
    second = threading.Thread(target=lambda: results.setdefault("b", cache.get_many([2, 3], slow)))
    second.start()
    release.set()
    first.join(5)
    second.join(5)
    assert calls[0] == [1, 2] and calls[1] == [3]  # chunk 2 was loaded once, the second thread waited
    assert (results["b"][2] == 2).all()
    cache.get_many([4, 5], slow)
    assert cache.nbytes == 3 * 800

    def failing(keys):
        yield 6, np.full(100, 6, np.float64)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        cache.get_many([6, 7], failing)
    assert cache.get_many([6, 7], slow)[7][0] == 7  # a failed load leaves nothing loading
    assert calls[-1] == [7]  # what it yielded before failing is kept


def test_the_cache_sees_a_store_rewritten(tmp_path):
    vio.write_single(np.ones((8, 8), np.float32), tmp_path / "r.zarr")
    assert vio.read(tmp_path / "r.zarr")[0, 0] == 1
    os.rename(tmp_path / "r.zarr", tmp_path / "old.zarr")
    vio.write_single(np.full((8, 8), 2, np.float32), tmp_path / "r.zarr")
    assert vio.read(tmp_path / "r.zarr")[0, 0] == 2


def test_sections_and_a_whole_tomogram_in_a_batch(tomogram):
    path, values = tomogram
    loader = vio.loader(workers=3)
    out = np.zeros((5, 1, 32, 32), np.float32)
    centres = [[0, 0, 0], [39, 95, 79], [20, 48, 40], [5, 17, 63], [33, 80, 10]]
    vio.read_patches_async(loader, out, path, centres).get()
    for patch, (z, y, x) in zip(out, centres):
        expected = np.zeros((32, 32), np.float32)
        ys, xs = slice(max(y - 16, 0), min(y + 16, SHAPE[1])), slice(max(x - 16, 0), min(x + 16, SHAPE[2]))
        expected[ys.start - (y - 16) : ys.stop - (y - 16), xs.start - (x - 16) : xs.stop - (x - 16)] = values[
            z, ys, xs
        ]
        np.testing.assert_array_equal(patch[0], expected)
    whole = np.zeros((2, *SHAPE), np.float64)
    vio.read_batch_async(loader, whole, [path, path]).get()
    np.testing.assert_array_equal(whole[1], values)
    assert CHUNKS == 16


def test_vitrio_convert_replaces_a_store_only_with_force_and_keeps_it_when_that_fails(tmp_path, capsys):
    from vitrio.cli import main

    first, second = np.ones((8, 16, 16), np.float32), np.full((4, 8, 8), 300.5, np.float32)
    vio.write_single(first, tmp_path / "first.mrc")
    vio.write_single(second, tmp_path / "second.mrc")
    store = tmp_path / "out.zarr"
    assert main(["convert", str(tmp_path / "first.mrc"), str(store)]) == 0
    assert main(["convert", str(tmp_path / "second.mrc"), str(store)]) == 1
    assert "out.zarr: exists already; give --force" in capsys.readouterr().err
    np.testing.assert_array_equal(vio.read(store), first)
    # 300.5 does not fit uint8: the conversion fails after the old store was moved aside; it comes back
    assert main(["convert", "--force", "--data-type", "uint8", str(tmp_path / "second.mrc"), str(store)]) == 1
    np.testing.assert_array_equal(vio.read(store), first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.mrc", "out.zarr", "second.mrc"]
    assert main(["convert", "--force", str(tmp_path / "second.mrc"), str(store)]) == 0
    np.testing.assert_array_equal(vio.read(store), second)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.mrc", "out.zarr", "second.mrc"]
    (tmp_path / "folder").mkdir()  # a folder that is no store is still refused
    assert main(["convert", "--force", str(tmp_path / "second.mrc"), str(tmp_path / "folder")]) == 1
    assert "is a directory" in capsys.readouterr().err


def test_zarr_chunks_at_once_sets_how_many_chunks_a_read_fetches_together(tomogram, monkeypatch):
    path, values = tomogram
    groups = []
    get_many = ChunkCache.get_many

    def counted(self, keys, load):
        groups.append(len(keys))
        return get_many(self, keys, load)

    monkeypatch.setattr(ChunkCache, "get_many", counted)
    chunks = 3 * 6 * 5  # SHAPE in chunks of 16
    np.testing.assert_array_equal(vio.read(path), values)
    assert groups == [64, chunks - 64]
    groups.clear()
    with configure(zarr_chunks_at_once=10):
        np.testing.assert_array_equal(vio.read(path), values)
    assert groups == [10] * 9


def test_zarr_levels_kept_sets_how_many_levels_are_opened_once(tomogram, monkeypatch):
    path, _ = tomogram
    opened = []
    open_level = vitrio.formats.zarr.open_level

    def counted(store, number):
        opened.append(number)
        return open_level(store, number)

    monkeypatch.setattr(vitrio.formats.zarr, "open_level", counted)
    OmeZarrFormat.clear_cache()
    for levels_kept, again in [(2, [0, 1]), (1, [0, 1, 0, 1])]:
        opened.clear()
        with configure(zarr_levels_kept=levels_kept):
            for level in [0, 1, 0, 1]:
                vio.query_metadata(f"{path}#{level}")
        assert opened == again
        OmeZarrFormat.clear_cache()


def test_the_shared_chunk_cache_holds_what_the_configuration_says():
    with configure(zarr_cache_bytes=12345):
        assert ChunkCache().capacity == 12345
    assert OmeZarrFormat.chunk_cache.capacity == configuration().zarr_cache_bytes
    assert ChunkCache(7).capacity == 7
