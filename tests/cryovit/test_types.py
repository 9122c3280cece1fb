"""Tests of cryovit.types: the enums, the dataclasses and the tensorclasses with their tensordict methods."""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import MemoryMappedTensor, NonTensorData, TensorDict, is_tensorclass

from cryovit.types import (
    BatchedModelResult,
    BatchedTomogramData,
    BatchedTomogramMetadata,
    FileData,
    ModelType,
    Sample,
    TomogramData,
)


@pytest.fixture(autouse=True)
def _warnings_are_errors() -> Iterator[None]:
    """Turns tensordict's FutureWarning and DeprecationWarning into failures."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def make_tomogram(
    sample: str = "Q18", name: str = "t1.hdf", depth: int = 4, split_id: int | None = 2
) -> TomogramData:
    """A TomogramData of random data."""
    return TomogramData(
        sample=sample,
        tomo_name=name,
        split_id=split_id,
        data=torch.randn(1, depth, 5, 6),
        label=torch.rand(depth, 5, 6) > 0.5,
        aux_data={"voxel_size": 1.5},
        batch_size=[],
    )


def make_batch(sizes: tuple[int, ...] = (4, 2, 3), channels: bool = True) -> BatchedTomogramData:
    """A BatchedTomogramData of random data, zero past each tomogram's depth."""
    depth = max(sizes)
    shape = (len(sizes), depth, 1, 3, 2) if channels else (len(sizes), depth, 3, 2)
    tomo_batch = torch.randn(shape)
    for i, n in enumerate(sizes):
        tomo_batch[i, n:] = 0
    samples = ["WT", "Q18", "WT"][: len(sizes)]
    names = [f"tomo{i}.hdf" for i in range(len(sizes))]
    return BatchedTomogramData(
        tomo_batch=tomo_batch,
        tomo_sizes=torch.tensor(sizes, dtype=torch.int32),
        labels=(torch.rand(len(sizes), depth, 3, 2) > 0.5).float(),
        metadata=BatchedTomogramMetadata.from_names(samples, names, split_id=list(range(len(sizes)))),
        min_slices=2,
        aux_data={"scale": [1.0] * len(sizes)},
        batch_size=[len(sizes)],
    )


def same(a: Any, b: Any) -> bool:
    """Whether two tensorclasses are of one class and batch size and hold equal values in every field.

    Reads the fields themselves (not the state dict, which is under test), nested tensorclasses included.
    """
    if type(a) is not type(b) or a.batch_size != b.batch_size:
        return False
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if is_tensorclass(x):
            if not same(x, y):
                return False
        elif isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x.cpu(), y.cpu())):
                return False
        elif isinstance(y, torch.Tensor) or x != y:
            return False
    return True


def assert_same(a: Any, b: Any) -> None:
    """Asserts ``same(a, b)``, showing both on failure."""
    assert same(a, b), f"{a}\n!=\n{b}"


def other_values(obj: Any) -> Any:
    """A copy of a tensorclass with zeroed tensors and other strings, to load values into."""
    other = obj.clone().apply(torch.zeros_like)
    if isinstance(other, TomogramData):
        other.set("sample", "other")
    elif isinstance(other, BatchedTomogramMetadata):
        other.set("samples", NonTensorData(["other"]))
    else:
        other.set(("metadata", "tomo_names"), NonTensorData(["other"] * 3))
    assert not same(other, obj)
    return other


def test_sample_members_and_values() -> None:
    expected = {
        "BACHD": "BACHD",
        "BACHD_Microtubules": "BACHD Microtubules",
        "dN17_BACHD": "dN17 BACHD",
        "Q109": "Q109",
        "Q109_Microtubules": "Q109 Microtubules",
        "Q18": "Q18",
        "Q18_Microtubules": "Q18 Microtubules",
        "Q20": "Q20",
        "Q53": "Q53",
        "Q53_KD": "Q53 PIAS1",
        "Q66": "Q66",
        "Q66_GRFS1": "Q66 GRFS1",
        "Q66_KD": "Q66 PIAS1",
        "WT": "Wild Type",
        "WT_Microtubules": "Wild Type Microtubules",
        "cancer": "Cancer",
        "AD": "AD",
        "AD_Abeta": "AD Abeta",
        "Aged": "Aged",
        "Young": "Young",
        "RGC_CM": "RGC CM",
        "RGC_control": "RGC Control",
        "RGC_naPP": "RGC naPP",
        "RGC_PP": "RGC PP",
        "CZI_Algae": "Algae",
        "CZI_Campy_C": "Campy C",
        "CZI_Campy_CDel": "Campy C-Deletion",
        "CZI_Campy_F": "Campy F",
        "CZI_Fibroblast": "Mouse Fibroblast",
    }
    assert {member.name: member.value for member in Sample} == expected
    assert Sample("Wild Type") is Sample.WT


def test_model_type_members_and_values() -> None:
    assert {m.name: m.value for m in ModelType} == {
        "CRYOVIT": "cryovit",
        "UNET3D": "unet3d",
        "SAM2": "sam2",
        "MEDSAM": "medsam",
    }


def test_file_data_defaults() -> None:
    data = FileData(tomo_path=Path("a.mrc"))
    assert (data.label_path, data.labels, data.sample) == (None, None, None)
    assert [f.name for f in dataclasses.fields(FileData)] == ["tomo_path", "label_path", "labels", "sample"]
    full = FileData(Path("a.mrc"), Path("a.hdf"), ["mito"], "WT")
    assert full.labels == ["mito"] and full.sample == "WT"


def test_batched_model_result_fields() -> None:
    result = BatchedModelResult(
        num_tomos=1,
        samples=["WT"],
        tomo_names=["t.hdf"],
        split_id=None,
        data=[np.zeros((2, 3, 3), np.float32)],
        label=[np.zeros((2, 3, 3), np.uint8)],
        preds=[np.ones((2, 3, 3), np.float32)],
        losses={"dice": 0.5},
        metrics={"f1": 0.7},
    )
    assert result.aux_data is None
    assert result.preds[0].dtype == np.float32 and result.metrics == {"f1": 0.7}
    assert [f.name for f in dataclasses.fields(BatchedModelResult)][-1] == "aux_data"


def test_tomogram_data_keeps_python_values() -> None:
    tomo = make_tomogram()
    assert tomo.sample == "Q18" and tomo.tomo_name == "t1.hdf"
    assert tomo.split_id == 2 and type(tomo.split_id) is int
    assert tomo.aux_data == {"voxel_size": 1.5}
    assert tomo.data.dtype == torch.float32 and tomo.label.dtype == torch.bool
    assert make_tomogram(split_id=None).split_id is None


@pytest.mark.parametrize(
    ("data", "label", "error"),
    [
        (torch.zeros(5, 6), torch.zeros(4, 5, 6, dtype=torch.bool), ValueError),
        (torch.zeros(1, 4, 5, 6, dtype=torch.int16), torch.zeros(4, 5, 6, dtype=torch.bool), ValueError),
        (torch.zeros(1, 4, 5, 6), torch.zeros(4, 5, dtype=torch.bool), ValueError),
        (torch.zeros(1, 4, 5, 6), torch.zeros(3, 5, 6, dtype=torch.bool), ValueError),
        (torch.zeros(1, 4, 5, 6), torch.zeros(2, 4, 5, 6, dtype=torch.bool), ValueError),
        (torch.zeros(3, 1, 5, 6), torch.zeros(4, 5, 6, dtype=torch.bool), ValueError),
        (torch.zeros(4, 5, 6), torch.zeros(1, 3, 5, 6, dtype=torch.bool), ValueError),
        ("not an array", torch.zeros(4, 5, 6, dtype=torch.bool), TypeError),
    ],
)
def test_tomogram_data_validation_names_the_tomogram(data: Any, label: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="WT/bad_tomo.hdf"):
        TomogramData(
            sample="WT", tomo_name="bad_tomo.hdf", split_id=None, data=data, label=label, batch_size=[]
        )


@pytest.mark.parametrize(
    ("data", "label"),
    [
        (np.ones((1, 4, 5, 6), np.float32), np.full((4, 5, 6), -1, np.int8)),
        (np.ones((4, 5, 6), np.float32), np.zeros((4, 5, 6), np.float32)),
        (np.ones((1536, 4, 2, 3), np.float16), np.zeros((4, 32, 48), np.float32)),
        (torch.ones(2, 4, 5, 6, dtype=torch.float64), torch.zeros(4, 5, 6, dtype=torch.bool)),
    ],
)
def test_tomogram_data_takes_the_layouts_of_the_pipeline(data: Any, label: Any) -> None:
    """Channel-first data, features coarser than their label, numpy arrays cast without a copy."""
    tomo = TomogramData(sample="WT", tomo_name="t.hdf", split_id=None, data=data, label=label, batch_size=[])
    assert isinstance(tomo.data, torch.Tensor) and isinstance(tomo.label, torch.Tensor)
    assert tuple(tomo.data.shape) == data.shape and tuple(tomo.label.shape) == label.shape
    assert tomo.data.dtype == torch.as_tensor(data).dtype and tomo.label.dtype == torch.as_tensor(label).dtype
    if isinstance(data, np.ndarray):
        assert np.shares_memory(tomo.data.numpy(), data) and np.shares_memory(tomo.label.numpy(), label)
    assert torch.equal(tomo.label, torch.as_tensor(label))  # -1 stays -1


@pytest.mark.parametrize(
    ("data", "label", "depth_first"),
    [
        ((1, 4, 5, 6), (4, 5, 6), False),  # the pipeline's datasets: channel-first
        ((4, 5, 6), (4, 5, 6), False),
        ((1, 4, 5, 6), (1, 4, 5, 6), False),
        ((4, 1, 32, 48), (1, 4, 20, 30), True),  # the DINO input, resized, and its dummy label
        ((4, 1536, 2, 3), (4, 32, 48), True),  # precomputed features and a full-resolution label
        ((4, 4, 5, 6), (4, 5, 6), False),  # both readings fit: channel-first
        ((1, 1, 5, 6), (1, 5, 6), False),
    ],
)
def test_tomogram_data_takes_either_layout(
    data: tuple[int, ...], label: tuple[int, ...], depth_first: bool
) -> None:
    """Data channel-first or depth-first, told apart by the label's depth, and kept as given."""
    values, labels = np.random.default_rng(0).random(data, np.float32), np.ones(label, bool)
    tomo = TomogramData(
        sample="WT", tomo_name="t.hdf", split_id=None, data=values, label=labels, batch_size=[]
    )
    assert tomo.depth_first is depth_first
    assert tuple(tomo.data.shape) == data and tuple(tomo.label.shape) == label
    assert np.shares_memory(tomo.data.numpy(), values) and np.shares_memory(tomo.label.numpy(), labels)
    stacked = torch.stack([tomo, tomo.clone()])
    assert stacked.depth_first is depth_first and stacked[1].depth_first is depth_first


def test_a_tomogram_of_no_agreeing_depth_names_both_shapes() -> None:
    with pytest.raises(
        ValueError,
        match=r"tomogram WT/t\.hdf: data of shape \(3, 1536, 2, 3\) and label of shape \(4, 32, 48\) "
        r"do not agree in depth",
    ):
        TomogramData(
            sample="WT",
            tomo_name="t.hdf",
            split_id=None,
            data=torch.zeros(3, 1536, 2, 3),
            label=torch.zeros(4, 32, 48),
            batch_size=[],
        )


def test_numpy_arrays_of_aux_data_stay_numpy_arrays(tmp_path: Path) -> None:
    """Through construction, stacking, saving, loading and a state dict, as the pipeline's writers need."""
    volume = np.arange(60, dtype=np.float16).reshape(3, 4, 5)
    tomo = TomogramData(
        sample="WT",
        tomo_name="t.hdf",
        split_id=None,
        data=torch.zeros(1, 3, 4, 5),
        label=torch.zeros(3, 4, 5),
        aux_data={"data": volume, "labels": [volume > 30, volume > 40], "scale": 2.0},
        batch_size=[],
    )
    assert tomo.aux_data["data"] is volume
    tomo.save(tmp_path / "t")
    loaded = TomogramData.load(tmp_path / "t")
    assert type(loaded.aux_data["data"]) is np.ndarray and loaded.aux_data["data"].dtype == np.float16
    np.testing.assert_array_equal(loaded.aux_data["data"], volume)
    assert [a.dtype for a in loaded.aux_data["labels"]] == [np.bool_, np.bool_]
    np.testing.assert_array_equal(loaded.aux_data["labels"][1], volume > 40)
    assert loaded.aux_data["scale"] == 2.0 and tomo.aux_data["data"] is volume
    state = tmp_path / "state.pt"
    torch.save(tomo.state_dict(), state)
    target = tomo.clone()
    target.aux_data = None
    target.load_state_dict(torch.load(state, weights_only=True))
    assert type(target.aux_data["data"]) is np.ndarray and target.aux_data["data"].dtype == np.float16
    np.testing.assert_array_equal(target.aux_data["data"], volume)
    # an array torch has no tensor of is refused, as any value that is not JSON
    tomo.aux_data = {"names": np.array(["a", "b"], dtype=object)}
    with pytest.raises(TypeError, match="TomogramData.aux_data: a dict is not saved"):
        tomo.save(tmp_path / "u")


def test_stacked_tomograms_unbind_and_reload(tmp_path: Path) -> None:
    stacked = torch.stack([make_tomogram("WT", "a.hdf"), make_tomogram("Q18", "b.hdf")])
    assert stacked.batch_size == (2,) and list(stacked.sample) == ["WT", "Q18"]
    first, second = stacked.unbind(0)
    assert (first.sample, second.tomo_name) == ("WT", "b.hdf")
    assert torch.equal(second.data, stacked.data[1])
    stacked.save(tmp_path)  # the check of __post_init__ on loading counts the batch dimension
    assert_same(TomogramData.load(tmp_path), stacked)


def test_metadata_from_names_unique_id_and_identifiers() -> None:
    samples, names = ["WT", "Q18", "WT", "WT"], ["a", "b", "c", "a"]
    meta = BatchedTomogramMetadata.from_names(samples, names, split_id=[1, 2, 3, 4])
    assert meta.batch_size == ()  # as the pipeline makes it
    assert meta.samples == ["WT", "Q18"] and meta.tomo_names == ["a", "b", "c"]  # distinct, first seen
    assert type(meta.samples) is list and type(meta.tomo_names) is list
    assert meta.unique_id.dtype == torch.long
    assert meta.unique_id.tolist() == [[0, 0], [1, 1], [0, 2], [0, 0]]
    assert meta.identifiers == (samples, names)
    resolved = [(meta.samples[j], meta.tomo_names[k]) for j, k in meta.unique_id.tolist()]
    assert resolved == list(zip(*meta.identifiers))
    assert meta.split_id.tolist() == [1, 2, 3, 4]
    assert meta.from_names(["WT"], ["a"]).split_id is None


@pytest.mark.parametrize("count", [1, 2, 3])
def test_identifiers_unpack_into_samples_and_names(count: int) -> None:
    """``samples, tomo_names = identifiers`` for any number of tomograms, in the batch's order."""
    samples, names = ["WT", "Q18", "WT"][:count], ["a", "b", "c"][:count]
    batch = make_batch((4, 2, 3)[:count])
    batch.metadata = BatchedTomogramMetadata.from_names(samples, names)
    got_samples, got_names = batch.metadata.identifiers
    assert (got_samples, got_names) == (samples, names)


def test_metadata_built_as_the_pipeline_builds_it() -> None:
    """Distinct values, ``unique_id`` into them, ``batch_size=[]``, put in a batch of ``[B]``."""
    meta = BatchedTomogramMetadata(
        samples=["WT", "AD"],
        tomo_names=["a", "b"],
        unique_id=torch.tensor([[0, 0], [1, 1], [0, 1]]),
        split_id=[torch.tensor(0, dtype=torch.int32), torch.tensor(1, dtype=torch.int32), 2],
        batch_size=[],
    )
    assert meta.identifiers == (["WT", "AD", "WT"], ["a", "b", "b"])
    batch = make_batch()
    batch.metadata = meta
    assert batch.metadata.identifiers == (["WT", "AD", "WT"], ["a", "b", "b"])
    assert batch.metadata.split_id.tolist() == [0, 1, 2]


def test_metadata_of_an_indexed_batch_names_its_tomograms() -> None:
    batch = make_batch()
    batch.metadata = BatchedTomogramMetadata.from_names(
        ["WT", "Q18", "AD"], ["a", "b", "c"], split_id=[0, 1, 2]
    )
    items = batch.unbind(0)
    assert [item.metadata.identifiers for item in items] == [
        (["WT"], ["a"]),
        (["Q18"], ["b"]),
        (["AD"], ["c"]),
    ]
    assert int(items[2].metadata.split_id) == 2
    assert batch[1:].metadata.identifiers == (["Q18", "AD"], ["b", "c"])
    assert batch[torch.tensor([2, 0])].metadata.identifiers == (["AD", "WT"], ["c", "a"])


def test_metadata_validation() -> None:
    with pytest.raises(ValueError, match="unique_id"):
        BatchedTomogramMetadata(
            samples=["a"], tomo_names=["b"], unique_id=torch.zeros(1, 3), split_id=None, batch_size=[1]
        )
    with pytest.raises(ValueError, match="one entry per tomogram"):
        BatchedTomogramMetadata.from_names(["a", "b"], ["x"])


@pytest.mark.parametrize("channels", [True, False])
def test_batch_properties_and_flat_indexing(channels: bool) -> None:
    sizes = (4, 2, 3)
    batch = make_batch(sizes, channels)
    assert batch.tomo_sizes.dtype == torch.int32
    assert batch.num_tomos == 3 and batch.num_slices == 4
    flat = batch.flat_tomo_batch
    assert flat.shape == (3 * 4, *batch.tomo_batch.shape[2:])  # padding included, as the spec says
    assert torch.equal(flat.view(batch.tomo_batch.shape), batch.tomo_batch)
    for i in range(batch.num_slices):
        index = batch.index_to_flat_batch(i)
        assert index.dtype == torch.long
        assert len(index) == sum(n > i for n in sizes)
        assert index.tolist() == [b * 4 + i for b, n in enumerate(sizes) if n > i]
        assert torch.equal(flat[index], batch.tomo_batch[batch.tomo_sizes > i, i])
    for bad in (batch.num_slices, -1):
        with pytest.raises(IndexError, match=f"slice {bad} is out of range for a batch of 4 slices"):
            batch.index_to_flat_batch(bad)


def test_batch_keeps_python_values_and_unbinds_per_tomogram() -> None:
    batch = make_batch()
    assert batch.min_slices == 2 and type(batch.min_slices) is int
    assert batch.aux_data == {"scale": [1.0, 1.0, 1.0]}
    items = batch.unbind(0)
    assert len(items) == 3
    for i, item in enumerate(items):
        assert isinstance(item, BatchedTomogramData)
        samples, names = batch.metadata.identifiers
        assert item.metadata.identifiers == ([samples[i]], [names[i]])
        assert torch.equal(item.tomo_batch, batch.tomo_batch[i])
        assert int(item.tomo_sizes) == int(batch.tomo_sizes[i]) and item.min_slices == 2


MAKERS: dict[str, Callable[[], Any]] = {
    "tomogram": make_tomogram,
    "metadata": lambda: BatchedTomogramMetadata.from_names(["WT", "Q18"], ["a", "b"], split_id=[3, 4]),
    "batch": make_batch,
}


@pytest.fixture(params=list(MAKERS))
def obj(request: pytest.FixtureRequest) -> Any:
    """One instance of each tensorclass, with string, int and nested fields."""
    return MAKERS[request.param]()


def test_save_load_and_aliases(obj: Any, tmp_path: Path) -> None:
    cls = type(obj)
    obj.save(tmp_path / "save")
    assert_same(cls.load(tmp_path / "save"), obj)
    assert_same(cls.load_memmap(tmp_path / "save"), obj)
    obj.dumps(tmp_path / "dumps")
    loaded = cls.load_memmap(tmp_path / "dumps")
    assert isinstance(loaded, cls)
    tensors = [
        v for v in loaded.state_dict(flatten=True, keep_vars=True).values() if isinstance(v, torch.Tensor)
    ]
    assert tensors and all(isinstance(t, MemoryMappedTensor) for t in tensors)
    assert_same(loaded, obj)


def test_load_into_existing(obj: Any, tmp_path: Path) -> None:
    obj.save(tmp_path)
    target = other_values(obj)
    assert target.load_(tmp_path) is target
    assert_same(target, obj)


def test_memmap_variants(obj: Any, tmp_path: Path) -> None:
    mapped = obj.memmap(tmp_path / "memmap")
    assert mapped is not obj and mapped.is_memmap() and not obj.is_memmap()
    assert_same(mapped, obj)
    copy = obj.clone()
    assert copy.memmap_(tmp_path / "memmap_") is copy and copy.is_memmap()
    assert_same(copy, obj)
    like = obj.memmap_like(tmp_path / "like")
    assert like.is_memmap()
    for key, value in obj.state_dict(flatten=True).items():
        other = like.state_dict(flatten=True)[key]
        if isinstance(value, torch.Tensor):
            assert other.shape == value.shape and other.dtype == value.dtype
            assert not other.any()
        else:
            assert other == value


def test_memmap_refresh_reads_what_is_on_disk(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        make_batch().memmap_refresh_()
    mapped = make_batch().memmap(tmp_path)
    rewritten = make_batch()
    rewritten.set(("metadata", "tomo_names"), ["x", "y", "z"])
    rewritten.memmap(tmp_path)
    assert mapped.metadata.tomo_names != ["x", "y", "z"]
    assert mapped.memmap_refresh_() is mapped
    assert mapped.metadata.tomo_names == ["x", "y", "z"]
    assert_same(mapped, rewritten)


@pytest.mark.parametrize("flatten", [False, True])
def test_state_dict_round_trip(obj: Any, flatten: bool) -> None:
    state = obj.state_dict(flatten=flatten)
    if not flatten:
        assert list(state) == [f.name for f in dataclasses.fields(obj)]
    if isinstance(obj, BatchedTomogramData):
        samples = state["metadata.samples"] if flatten else state["metadata"]["samples"]
        assert samples == ["WT", "Q18"] and type(samples) is list
    target = other_values(obj)
    assert target.load_state_dict(state) is target
    assert_same(target, obj)


def test_load_state_dict_copies_in_place_unless_assign() -> None:
    batch, template = make_batch(), make_batch()
    buffer = template.tomo_batch
    template.load_state_dict(batch.state_dict())
    assert template.tomo_batch is buffer and torch.equal(buffer, batch.tomo_batch)
    template.load_state_dict(make_batch().state_dict(), assign=True)
    assert template.tomo_batch is not buffer


def test_load_state_dict_strict() -> None:
    batch = make_batch()
    state = batch.state_dict()
    del state["min_slices"]
    with pytest.raises(KeyError, match="min_slices"):
        batch.load_state_dict(state)
    batch.load_state_dict(state, strict=False)
    with pytest.raises(KeyError, match="bogus"):
        batch.load_state_dict({**batch.state_dict(), "bogus": 1})


def test_to_and_from_tensordict(obj: Any) -> None:
    td = obj.to_tensordict()
    assert isinstance(td, TensorDict) and td.batch_size == obj.batch_size
    for key, value in obj.state_dict(flatten=True).items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(td.get(tuple(key.split("."))), value)
    assert_same(type(obj).from_tensordict(td), obj)


def test_fields_device_and_pickle(obj: Any) -> None:
    assert [f.name for f in type(obj).fields()] == [f.name for f in dataclasses.fields(type(obj))]
    assert obj.device is None
    assert obj.to("cpu").device == torch.device("cpu")
    assert_same(pickle.loads(pickle.dumps(obj)), obj)


def test_pin_memory_returns_an_equal_copy(obj: Any) -> None:
    for pinned in (obj.pin_memory(), obj.pin_memory(device=None), obj.pin_memory("cpu")):
        assert isinstance(pinned, type(obj)) and pinned is not obj
        assert_same(pinned, obj)


def test_min_slices_is_an_int_or_a_0d_tensor() -> None:
    batch = make_batch()
    for value in (2, torch.tensor(2), torch.tensor(2, dtype=torch.int32)):
        made = BatchedTomogramData(
            batch.tomo_batch,
            batch.tomo_sizes,
            batch.labels,
            batch.metadata,
            value,
            batch.aux_data,
            batch_size=[3],
        )
        assert made.min_slices == 2 and type(made.min_slices) is int
        keyword = BatchedTomogramData(
            tomo_batch=batch.tomo_batch,
            tomo_sizes=batch.tomo_sizes,
            labels=batch.labels,
            metadata=batch.metadata,
            min_slices=value,
            batch_size=[3],
        )
        assert keyword.min_slices == 2


def test_get_and_set_nested_keys() -> None:
    batch = make_batch()
    assert torch.equal(batch.get(("metadata", "unique_id")), batch.metadata.unique_id)
    assert batch.get(("metadata", "samples")) == ["WT", "Q18"]
    assert batch.get("min_slices") == 2
    new_id = torch.tensor([[1, 2], [0, 1], [1, 0]])
    assert batch.set(("metadata", "unique_id"), new_id) is batch
    assert torch.equal(batch.metadata.unique_id, new_id)
    batch.set(("metadata", "samples"), NonTensorData(["AD", "Aged"]))
    assert batch.metadata.identifiers == (["Aged", "AD", "Aged"], ["tomo2.hdf", "tomo1.hdf", "tomo0.hdf"])
    batch.set("min_slices", 5)
    assert batch.min_slices == 5


def test_device_given_at_construction() -> None:
    meta = BatchedTomogramMetadata.from_names(["WT"], ["a"], device="cpu")
    assert meta.device == torch.device("cpu") and meta.unique_id.device.type == "cpu"
