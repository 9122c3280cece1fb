"""Tests of cryovit with files others send or plant: links and external storage in HDF5 files,
compression bombs, pickles in saved folders, names that would write outside the output folder, and
symbolic links where a written file is made."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import vitrio as vio
from cryovit import _hdf5_chunks, hdf5
from cryovit.data import TomogramDataset, collate_tomograms, write_predictions
from cryovit.hdf5 import label_names, write_datasets
from cryovit.types import BatchedModelResult, BatchedTomogramData, FileData, TomogramData
from tests.hardening.helpers import swapping
from vitrio._partial import partial_path

OTHER = 12345
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- not for anyone else's eyes ...."[:64]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "id_ed25519"
    path.write_bytes(SECRET)
    return path


def _secret_h5(path: Path) -> Path:
    with h5py.File(path, "w") as file:
        file["secret"] = np.frombuffer(SECRET, np.uint8).reshape(4, 4, 4)
    return path


def _refused(path: Path, match: str, dataset: str = "data") -> None:
    """Reading ``dataset`` of ``path`` raises a FormatError naming the file, without the secret bytes."""
    readers = vio.reader_provider(formats=[hdf5.hdf5_format(dataset)])
    with pytest.raises(vio.FormatError, match=match) as error:
        vio.read(path, readers=readers)
    assert str(path) in str(error.value)
    assert SECRET[:16].decode() not in str(error.value)


# HDF5 datasets that read other files


def test_external_raw_storage_is_refused(tmp_path: Path, secret: Path) -> None:
    path = tmp_path / "tomo.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", (4, 4, 4), np.uint8, external=[(secret, 0, 64)])
    with h5py.File(path, "r") as file:  # h5py itself would read the key as a tomogram
        assert file["data"][()].tobytes() == SECRET
    _refused(path, f"stored in other files.*{secret.name}")
    with pytest.raises(vio.FormatError, match="tomo.h5"):
        TomogramDataset([FileData(path)])[0]


def test_a_virtual_dataset_is_refused(tmp_path: Path) -> None:
    source = _secret_h5(tmp_path / "private.h5")
    path = tmp_path / "tomo.h5"
    layout = h5py.VirtualLayout((4, 4, 4), np.uint8)
    layout[:] = h5py.VirtualSource(source, "secret", (4, 4, 4))
    with h5py.File(path, "w") as file:
        file.create_virtual_dataset("data", layout)
    _refused(path, "virtual")


def test_an_external_link_is_refused(tmp_path: Path) -> None:
    source = _secret_h5(tmp_path / "private.h5")
    path = tmp_path / "tomo.h5"
    with h5py.File(path, "w") as file:
        file["data"] = h5py.ExternalLink(source, "/secret")
    _refused(path, "'data' is an external link to '/secret' in .*private.h5")


def test_soft_links_on_the_path_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tomo.h5"
    with h5py.File(path, "w") as file:
        file["hidden"] = np.frombuffer(SECRET, np.uint8).reshape(4, 4, 4)
        file["data"] = h5py.SoftLink("/hidden")
        file["elsewhere/mito"] = np.zeros((4, 4, 4), np.uint8)
        file["labels"] = h5py.SoftLink("/elsewhere")
    _refused(path, "'data' is a soft link to '/hidden'")
    _refused(path, "'labels' is a soft link to '/elsewhere'", "labels/mito")
    with pytest.raises(vio.FormatError, match="tomo.h5.*'labels' is a soft link"):
        label_names(path)


def test_a_linked_label_is_named_and_its_read_refused(tmp_path: Path) -> None:
    source = _secret_h5(tmp_path / "private.h5")
    path = tmp_path / "labels.h5"
    with h5py.File(path, "w") as file:
        file["data"] = np.zeros((4, 4, 4), np.float32)
        file["labels/mito"] = np.zeros((4, 4, 4), np.uint8)
        file["labels/stolen"] = h5py.ExternalLink(source, "/secret")
    assert label_names(path) == ["mito", "stolen"]
    dataset = TomogramDataset([FileData(path, path)], label="stolen")
    with pytest.raises(vio.FormatError, match="labels.h5.*'labels/stolen' is an external link"):
        dataset[0]
    assert not TomogramDataset([FileData(path, path)], label="mito")[0].label.any()


# compression bombs


def _gzip_bomb(path: Path, side: int) -> Path:
    """An HDF5 file of one gzip chunk of ``side**3`` zero bytes, stored in about a thousandth of that."""
    compressor = zlib.compressobj(1)
    block = bytes(1 << 20)
    pieces = [compressor.compress(block) for _ in range(side**3 >> 20)]
    pieces.append(compressor.flush())
    with h5py.File(path, "w") as file:
        dataset = file.create_dataset("data", (side,) * 3, np.uint8, chunks=(side,) * 3, compression="gzip")
        dataset.id.write_direct_chunk((0, 0, 0), b"".join(pieces))
    return path


def _python(script: str, *args: object) -> subprocess.CompletedProcess[str]:
    """Runs ``script`` with ``args`` in a fresh interpreter that imports the code under test."""
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


_UNDER_A_LIMIT = """
import resource, sys
import numpy as np
import vitrio as vio
import cryovit.hdf5
with open("/proc/self/status") as status:
    size = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (size + (384 << 20),) * 2)
loader = vio.loader(workers=1)
for path in sys.argv[1:]:
    out = np.zeros((2, 8, 8, 8), np.float32)
    try:
        vio.read_patches_async(loader, out, path, [[4, 4, 4], [12, 12, 12]]).get()
        print("read", float(out.sum()))
    except vio.FormatError as error:
        print("refused", error)
"""


def test_a_chunk_far_larger_than_a_crop_is_refused_under_a_memory_limit(tmp_path: Path) -> None:
    bomb = _gzip_bomb(tmp_path / "bomb.h5", 1024)
    assert bomb.stat().st_size < 8 << 20
    fine = tmp_path / "fine.h5"
    with h5py.File(fine, "w") as file:
        file.create_dataset(
            "data", data=np.ones((64, 64, 64), np.uint8), chunks=(16, 16, 16), compression="gzip"
        )
    run = _python(textwrap.dedent(_UNDER_A_LIMIT), bomb, fine)
    assert run.returncode == 0, run.stderr
    refused, read = run.stdout.splitlines()
    assert refused.startswith(f"refused {bomb}") and "would decode 1073741824 bytes" in refused
    assert read == f"read {2 * 8**3}.0"


def test_a_file_of_chunks_stored_far_smaller_than_they_decode_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _gzip_bomb(tmp_path / "bomb.h5", 128)
    vio.read(path)  # about a thousand to one: what deflate reaches, allowed
    monkeypatch.setattr(_hdf5_chunks, "MAX_RATIO", 100)
    with pytest.raises(vio.FormatError, match=r"bomb.h5.*1 chunks of 2097152 bytes in \d+ bytes"):
        vio.read(path)


def test_the_crops_of_a_batch_decode_a_chunk_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.arange(32**3, dtype=np.float32).reshape(32, 32, 32)
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=values, chunks=(16, 32, 32), compression="gzip")
    decoded = []
    inflate = _hdf5_chunks._inflate

    def counting(data: bytes, limit: int, what: str) -> bytes:
        decoded.append(what)
        return inflate(data, limit, what)

    monkeypatch.setattr(_hdf5_chunks, "_inflate", counting)
    dataset = TomogramDataset([FileData(path)] * 8, crop=(4, 8), seed=3)
    batch = collate_tomograms(dataset.__getitems__(range(8)))
    for i, (z, y, x) in enumerate(batch.aux_data["crop_origin"]):
        np.testing.assert_array_equal(
            batch.tomo_batch[i, :, 0].numpy(), values[z : z + 4, y : y + 8, x : x + 8]
        )
    touched = {z // 16 for z, _, _ in batch.aux_data["crop_origin"]} | {
        (z + 3) // 16 for z, _, _ in batch.aux_data["crop_origin"]
    }
    assert len(decoded) == len(touched) <= 2


_BOMB_UNDER_A_LIMIT = """
import resource, sys, time
import vitrio as vio
import cryovit.hdf5
with open("/proc/self/status") as status:
    size = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (size + (384 << 20),) * 2)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    vio.read(sys.argv[1])
    print("read")
except vio.FormatError as error:
    print("refused", error)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
print(f"{time.monotonic() - start:.1f} s, {grown} MiB")
"""


@pytest.mark.parametrize(
    ("side", "shuffle", "problem"),
    [
        (64, False, " is stored in 1043644 bytes, more than a chunk of 4096 bytes takes"),
        (1024, False, ": its gzip stream decodes to more than the 1048576 bytes of a chunk"),
        (1024, True, ": its gzip stream decodes to more than the 1048576 bytes of a chunk"),
    ],
)
def test_a_chunk_whose_gzip_stream_inflates_to_a_gigabyte_is_refused_under_a_memory_limit(
    tmp_path: Path, side: int, shuffle: bool, problem: str
) -> None:
    """A 1 MiB gzip stream of 1 GiB as the one chunk of a 64 x 64 image (stored in more than such a
    chunk takes), and of a 1024 x 1024 image (stored in no more than its chunk: it is inflated, and
    stopped at the chunk's size); both pass the ratio of declared to stored sizes."""
    compressor = zlib.compressobj(9)
    pieces = [compressor.compress(bytes(1 << 20)) for _ in range(1024)]
    stream = b"".join(pieces) + compressor.flush()
    assert len(stream) == 1043644
    path = tmp_path / "bomb.h5"
    with h5py.File(path, "w") as file:
        options = {"chunks": (side, side), "compression": "gzip", "shuffle": shuffle}
        file.create_dataset("data", (side, side), np.uint8, **options).id.write_direct_chunk((0, 0), stream)
    assert path.stat().st_size < 2 << 20
    run = _python(_BOMB_UNDER_A_LIMIT, path)
    assert run.returncode == 0, run.stderr
    outcome, cost = run.stdout.splitlines()
    assert outcome == f"refused {path}: the chunk at (0, 0) of '/data'{problem}"
    seconds, mebibytes = (float(word) for word in cost.replace(",", "").split()[::2])
    assert seconds < 5 and mebibytes < 32, cost


@pytest.mark.parametrize(
    ("stream", "problem"),
    [
        (zlib.compress(bytes(100)), "decodes to 100 bytes, not the 1024 of a chunk of (32, 32)"),
        (zlib.compress(bytes(1024))[:-6], ": its gzip stream ends early"),
        (b"not zlib", ": corrupt gzip stream"),
    ],
)
def test_a_chunk_short_or_corrupt_is_a_format_error_naming_it(
    tmp_path: Path, stream: bytes, problem: str
) -> None:
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as file:
        dataset = file.create_dataset("data", (64, 64), np.uint8, chunks=(32, 32), compression="gzip")
        dataset[...] = 1
        dataset.id.write_direct_chunk((32, 0), stream)
    with pytest.raises(
        vio.FormatError,
        match=re.escape(f"{path}: the chunk at (32, 0) of '/data'") + ".*" + re.escape(problem),
    ):
        vio.read(path)


def test_a_dataset_of_a_filter_not_decoded_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=np.ones((8, 8), np.float32), chunks=(4, 4), fletcher32=True)
    with pytest.raises(vio.FormatError, match=f"{path}: dataset '/data' is stored with filter 'fletcher32'"):
        vio.read(path)


def test_chunks_never_written_read_as_the_fill_value(tmp_path: Path) -> None:
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as file:
        dataset = file.create_dataset(
            "data", (8, 8), np.int16, chunks=(4, 4), compression="gzip", fillvalue=7
        )
        dataset[:4, :4] = 3
    expected = np.full((8, 8), 7, np.int16)
    expected[:4, :4] = 3
    np.testing.assert_array_equal(vio.read(path), expected)


# pickles in saved folders


class _Payload:
    """What a hostile pickle holds: loading it creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def _tomogram() -> TomogramData:
    return TomogramData(
        sample="Wild Type",
        tomo_name="t.mrc",
        split_id=2,
        data=torch.arange(12, dtype=torch.float32).reshape(1, 1, 3, 4),
        label=torch.ones(1, 3, 4, dtype=torch.bool),
        aux_data={"crop_origin": (1, 2, 3), "notes": ["a", "b"]},
        batch_size=[],
    )


@pytest.mark.parametrize("folder", [".", "_tensordict/metadata"])
def test_a_pickle_in_a_saved_folder_is_never_loaded(tmp_path: Path, folder: str) -> None:
    batch = collate_tomograms([_tomogram(), _tomogram()])
    saved = tmp_path / "batch"
    batch.memmap(saved)
    assert not list(saved.rglob("*.pickle"))
    marker = tmp_path / "marker"
    (saved / folder / "other.pickle").write_bytes(pickle.dumps({"min_slices": _Payload(marker)}))
    for load in (
        lambda: BatchedTomogramData.load_memmap(saved),
        lambda: BatchedTomogramData.load(saved),
        lambda: batch.clone().load_memmap_(saved),
        lambda: batch.clone().load_(saved),
    ):
        with pytest.raises(ValueError, match=r"other\.pickle: a pickle, which is never loaded"):
            load()
    assert not marker.exists()


@pytest.mark.parametrize("plant", ["fifo", "link"])
def test_a_fifo_or_a_link_in_a_saved_folder_is_refused_before_anything_is_opened(
    tmp_path: Path, plant: str
) -> None:
    _tomogram().save(tmp_path / "t")
    tensors = tmp_path / "t" / "aux_data_tensors.safetensors"
    if not tensors.exists():  # the tensors of aux_data are saved only where it holds some
        collate_tomograms([_tomogram(), _tomogram()]).memmap(tmp_path / "t2")
        tensors = tmp_path / "t2" / "aux_data_tensors.safetensors"
    saved, name = tensors.parent, tensors.name
    tensors.unlink()
    if plant == "fifo":  # a blocking open of it would wait for a writer forever
        os.mkfifo(saved / name)
    else:  # a link would read another file of the user's
        (tmp_path / "private").write_bytes(b"secret")
        (saved / name).symlink_to(tmp_path / "private")
    load = BatchedTomogramData.load_memmap if saved.name == "t2" else TomogramData.load_memmap
    with pytest.raises(ValueError, match=rf"{name}: not a regular file or folder"):
        load(saved)


def test_a_saved_tomogram_round_trips_its_strings_and_lists(tmp_path: Path) -> None:
    tomogram = _tomogram()
    tomogram.save(tmp_path / "t")
    meta = json.loads((tmp_path / "t" / "_tensordict" / "aux_data" / "meta.json").read_text())
    assert meta["data"] == {"crop_origin": [1, 2, 3], "notes": ["a", "b"]}
    loaded = TomogramData.load_memmap(tmp_path / "t")
    assert (loaded.sample, loaded.tomo_name, loaded.split_id) == ("Wild Type", "t.mrc", 2)
    assert loaded.aux_data == {"crop_origin": [1, 2, 3], "notes": ["a", "b"]}
    assert torch.equal(loaded.data, tomogram.data) and torch.equal(loaded.label, tomogram.label)
    batch = collate_tomograms([tomogram, _tomogram()])
    batch.memmap(tmp_path / "b")
    again = BatchedTomogramData.load(tmp_path / "b")
    assert again.metadata.samples == ["Wild Type"]
    assert again.metadata.identifiers == (["Wild Type", "Wild Type"], ["t.mrc", "t.mrc"])
    assert again.aux_data["notes"] == [["a", "b"], ["a", "b"]] and again.min_slices == 1
    # the inputs collate_tomograms adds are numpy arrays: saved beside, loaded as numpy arrays again,
    # without unpickling
    assert (tmp_path / "b" / "aux_data_tensors.safetensors").is_file()
    for inputs in (again.aux_data["data"], batch.aux_data["data"]):  # the batch is as it was
        assert all(type(a) is np.ndarray and a.dtype == np.float32 for a in inputs)
        assert all(np.array_equal(a, tomogram.data[0].numpy()) for a in inputs)
    state = tmp_path / "state.pt"
    torch.save(batch.state_dict(), state)
    loaded_state = torch.load(state, weights_only=True)
    assert loaded_state["metadata"]["samples"] == ["Wild Type"]
    restored = collate_tomograms([_tomogram(), _tomogram()]).load_state_dict(loaded_state)
    assert all(type(a) is np.ndarray for a in restored.aux_data["data"])
    assert all(np.array_equal(a, tomogram.data[0].numpy()) for a in restored.aux_data["data"])


def test_a_field_that_is_not_json_is_not_saved(tmp_path: Path) -> None:
    tomogram = _tomogram()
    tomogram.aux_data = {"where": Path("x")}
    with pytest.raises(TypeError, match="TomogramData.aux_data: a dict is not saved"):
        tomogram.memmap(tmp_path / "t")
    assert not (tmp_path / "t").exists()


# names that would write outside the output folder


def _result(samples: list[str], names: list[str]) -> BatchedModelResult:
    zeros = [np.zeros((2, 3, 3), np.float32) for _ in samples]
    return BatchedModelResult(
        num_tomos=len(samples),
        samples=samples,
        tomo_names=names,
        split_id=None,
        data=zeros,
        label=[np.zeros((2, 3, 3), np.uint8) for _ in samples],
        preds=zeros,
        losses={},
        metrics={},
    )


@pytest.mark.parametrize(
    ("sample", "name"),
    [
        ("../../x", "t.mrc"),
        ("..", "t.mrc"),
        ("/abs/olute", "t.mrc"),
        ("s", "../../t.mrc"),
        ("s", "/etc/t.mrc"),
    ],
)
def test_names_that_leave_the_output_folder_are_refused(tmp_path: Path, sample: str, name: str) -> None:
    out = tmp_path / "deep" / "out"
    with pytest.raises(ValueError, match="not a plain file or folder name"):
        write_predictions(_result(["ok", sample], ["a.mrc", name]), out)
    assert not list(tmp_path.rglob("*"))  # not even the files of the plain names


@pytest.mark.parametrize("where", ["outside", "out/t"])
def test_a_sample_folder_that_is_a_link_is_refused(tmp_path: Path, where: str) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / where
    out.mkdir()
    elsewhere.mkdir()
    (out / "s").symlink_to(elsewhere)
    with pytest.raises(ValueError, match=f"{out / 's'}: a symbolic link, not a folder"):
        write_predictions(_result(["ok", "s"], ["a.mrc", "b.mrc"]), out)
    assert not list(elsewhere.iterdir()) and not list((out / "ok").iterdir())


def test_a_sample_folder_swapped_for_a_link_in_a_loop_does_not_redirect_the_write(tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="vitrio-results-"))
    try:
        shared.chmod(0o755)
        out, victim = shared / "out", shared / "raw"
        out.mkdir()
        out.chmod(0o777)  # a group's results folder, without the sticky bit
        victim.mkdir()
        raw = victim / "t.mrc"
        raw.write_bytes(b"the victim's raw tomogram")
        (out / "s").mkdir()
        (out / "l").symlink_to(victim)
        for path in (out / "s", out / "l"):
            os.chown(path, OTHER, OTHER, follow_symlinks=False)
        written = refused = 0
        with swapping(out / "s", out / "l", OTHER) as swaps:
            deadline = time.monotonic() + 20
            while written + refused < 2000 and time.monotonic() < deadline:
                try:
                    write_predictions(_result(["s"], ["t.mrc"]), out)
                    written += 1
                except (ValueError, OSError):  # a link, or a folder gone for a moment
                    refused += 1
        assert raw.read_bytes() == b"the victim's raw tomogram"
        assert swaps[0] > 100 and written > 10 and refused > 10, (swaps, written, refused)
        assert [p.name for p in victim.iterdir()] == ["t.mrc"]
    finally:
        shutil.rmtree(shared)


# symbolic links where a written file is made


@pytest.mark.parametrize("how", ["write_datasets", "write_predictions"])
def test_links_planted_at_partial_names_do_not_redirect_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    out = tmp_path / "out"
    (out / "s").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    target = out / "s" / "a.hdf5"
    for pid in range(os.getpid() - 3, os.getpid() + 4):  # the names the writer used to use
        (target.parent / f".{target.name}.{pid}.partial").symlink_to(victim)
    tokens = itertools.chain(["0123456789abcdef"], (f"{i:016x}" for i in itertools.count(1)))
    monkeypatch.setattr("secrets.token_hex", lambda n: next(tokens))
    Path(partial_path(target, "0123456789abcdef")).symlink_to(victim)
    values = np.arange(18, dtype=np.float32).reshape(2, 3, 3)
    if how == "write_datasets":
        write_datasets(target, {"preds": values})
    else:
        result = _result(["s"], ["a.mrc"])
        result.preds[0][:] = values
        assert write_predictions(result, out, "hdf5") == [target]
    assert victim.read_bytes() == b"precious"
    assert not target.is_symlink()
    with h5py.File(target, "r") as file:
        np.testing.assert_array_equal(file["preds"][()], values)
    links = [p for p in target.parent.iterdir() if p.name.endswith(".partial")]
    assert len(links) == 8 and all(p.is_symlink() and p.resolve() == victim for p in links)


def test_the_tensors_of_aux_data_are_loaded_without_unpickling(tmp_path: Path) -> None:
    batch = collate_tomograms([_tomogram(), _tomogram()])
    saved = tmp_path / "batch"
    batch.memmap(saved)
    stored = saved / "aux_data_tensors.safetensors"
    header_length = int.from_bytes(stored.read_bytes()[:8], "little")
    header = json.loads(stored.read_bytes()[8 : 8 + header_length])
    assert header["0"]["dtype"] == "F32" and header["0"]["shape"] == [1, 3, 4]
    marker = tmp_path / "marker"
    torch.save([_Payload(marker)], stored)  # a pickle in its place is not a header: refused, never run
    with pytest.raises(ValueError, match=r"aux_data_tensors\.safetensors: the tensors of aux_data cannot"):
        BatchedTomogramData.load_memmap(saved)
    assert not marker.exists()
    lying = json.dumps({"0": {"dtype": "F32", "shape": [1000, 1000], "data_offsets": [0, 4_000_000]}})
    stored.write_bytes(len(lying).to_bytes(8, "little") + lying.encode() + bytes(16))
    with pytest.raises(ValueError, match="lies outside the file"):
        BatchedTomogramData.load(saved)
