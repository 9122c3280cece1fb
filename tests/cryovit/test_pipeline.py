"""The CryoViT training and evaluation pipeline, run as its users run it, on cryovit.types and cryovit.data.

The model, losses, steps and writer below are written the way the pipeline's own are: a 3-D UNet over
``batch.tomo_batch``, a Dice and a focal loss that leave out ``y_true > -1``, evaluation steps that do
``samples, tomo_names = batch.metadata.identifiers`` and write ``batch.aux_data["data"]`` beside the
predictions in ``<out>/<sample>/<tomo_name>``, and the pipeline's own ``collate_fn``. They run on
tomograms in the pipeline's HDF5 layout (``data`` uint8, ``labels/mito`` int8 with -1 where not
annotated, ``dino_features`` float16) and on MRC files, in batches of 1, 2 and 3 tomograms of
different depths; every value that reaches the model, the masks of the losses and the files written
are checked against what the files hold. Lightning's ``Trainer`` runs them with the pipeline's writer
callbacks (HDF5 files per tomogram, a CSV of metrics, numpy on ``aux_data["data"]``) and its DINO
feature extraction (depth-first tomograms ``[D, 1, H', W']`` into a model of ``[B*D, C, H, W]``, the
features written, read back and batched again as ``[D, 1536, h, w]``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import h5py
import mrcfile
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from cryovit.data import TomogramDataset, collate_tomograms, model_result
from cryovit.types import (
    BatchedModelResult,
    BatchedTomogramData,
    BatchedTomogramMetadata,
    FileData,
    TomogramData,
)

SIDE = 32
PATCH = 16
FEATURES = 1536
HDF5_DEPTHS = [5, 3, 4]
MRC_DEPTHS = [4, 2, 6]


@dataclass
class Tomogram:
    """What one tomogram's files hold, as the model should see it."""

    file: FileData
    sample: str
    name: str
    data: np.ndarray  # float32 [D, H, W], uint8 scaled to [0, 1]
    label: np.ndarray  # float32 [D, H, W]: 1, 0, -1 where not annotated
    features: np.ndarray | None  # float16 [FEATURES, D, H/16, W/16]


def write_hdf5(folder: Path, name: str, depth: int, rng: np.random.Generator) -> Tomogram:
    """A tomogram in the pipeline's HDF5 layout."""
    folder.mkdir(parents=True, exist_ok=True)
    data = rng.integers(0, 256, (depth, SIDE, SIDE), dtype=np.uint8)
    mito = (rng.random((depth, SIDE, SIDE)) > 0.6).astype(np.int8)
    mito[:, : SIDE // 4] = -1  # a band not annotated
    mito[depth - 1] = -1  # nor the last slice
    features = rng.standard_normal((FEATURES, depth, SIDE // PATCH, SIDE // PATCH)).astype(np.float16)
    path = folder / name
    with h5py.File(path, "w") as file:
        file["data"] = data
        file["labels/mito"] = mito
        file["dino_features"] = features
    expected = data.astype(np.float32) / 255
    return Tomogram(FileData(path, path), folder.name, name, expected, mito.astype(np.float32), features)


def write_mrc(folder: Path, name: str, depth: int, rng: np.random.Generator) -> Tomogram:
    """A float32 MRC tomogram and an int8 MRC label volume (1 is "mito", -1 not annotated)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = rng.standard_normal((depth, SIDE, SIDE)).astype(np.float32)
    classes = rng.integers(-1, 3, (depth, SIDE, SIDE)).astype(np.int8)  # -1, background, mito, other
    path, label_path = folder / name, folder / f"{Path(name).stem}_labels.mrc"
    with mrcfile.new(path) as mrc:
        mrc.set_data(data)
    with mrcfile.new(label_path) as mrc:
        mrc.set_data(classes)
    label = np.where(classes < 0, -1, classes == 1).astype(np.float32)
    return Tomogram(
        FileData(path, label_path, labels=["mito", "other"]), folder.name, name, data, label, None
    )


@pytest.fixture(scope="module")
def tomograms(tmp_path_factory: pytest.TempPathFactory) -> list[Tomogram]:
    """Three HDF5 tomograms of sample Q18 and three MRC tomograms of sample WT, of different depths."""
    root, rng = tmp_path_factory.mktemp("tomograms"), np.random.default_rng(7)
    made = [write_hdf5(root / "Q18", f"tomo_{i}.hdf", d, rng) for i, d in enumerate(HDF5_DEPTHS)]
    made += [write_mrc(root / "WT", f"tomo_{i + 3}.mrc", d, rng) for i, d in enumerate(MRC_DEPTHS)]
    return made


# the pipeline's code, as its users run it


class UNet3D(torch.nn.Module):
    """A small 3-D UNet: ``[B, C, D, H, W]`` to logits ``[B, D, H * upsample, W * upsample]``."""

    def __init__(self, channels: int = 1, upsample: int = 1):
        super().__init__()
        self.down = torch.nn.Conv3d(channels, 4, 3, padding=1)
        self.middle = torch.nn.Conv3d(4, 4, 3, padding=1)
        self.out = torch.nn.Conv3d(8, 1, 1)
        self.upsample = upsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.down(x))
        b = F.relu(self.middle(F.max_pool3d(a, (1, 2, 2), ceil_mode=True)))
        b = F.interpolate(b, size=a.shape[2:], mode="nearest")
        y = self.out(torch.cat([a, b], 1))
        if self.upsample > 1:
            y = F.interpolate(y, scale_factor=(1, self.upsample, self.upsample), mode="nearest")
        return y[:, 0]


def dice_loss(y_pred: torch.Tensor, y_true: torch.Tensor, masks: list[torch.Tensor]) -> torch.Tensor:
    """The pipeline's Dice loss on logits, over the voxels with ``y_true > -1``."""
    mask = y_true > -1
    masks.append(mask)
    p, t = torch.sigmoid(y_pred[mask]), y_true[mask]
    return 1 - (2 * (p * t).sum() + 1) / (p.sum() + t.sum() + 1)


def focal_loss(
    y_pred: torch.Tensor, y_true: torch.Tensor, masks: list[torch.Tensor], gamma: float = 2.0
) -> torch.Tensor:
    """The pipeline's focal loss on logits, over the voxels with ``y_true > -1``."""
    mask = y_true > -1
    masks.append(mask)
    y_pred, y_true = y_pred[mask], y_true[mask]
    bce = F.binary_cross_entropy_with_logits(y_pred, y_true, reduction="none")
    p_t = torch.exp(-bce)
    return ((1 - p_t) ** gamma * bce).mean()


def write_result(path: Path, **arrays: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as file:
        for key, value in arrays.items():
            file[key] = value


class Segmenter:
    """The pipeline's steps over ``BatchedTomogramData``, as its LightningModule has them."""

    def __init__(self, net: torch.nn.Module, out: Path):
        self.net, self.out = net, out
        self.inputs: list[torch.Tensor] = []
        self.masks: list[torch.Tensor] = []

    def forward(self, batch: BatchedTomogramData) -> torch.Tensor:
        x = batch.tomo_batch.permute(0, 2, 1, 3, 4)  # [B, D, C, H, W] -> [B, C, D, H, W]
        self.inputs.append(x.detach().clone())
        return self.net(x.float())

    def losses(self, batch: BatchedTomogramData, y_pred: torch.Tensor) -> dict[str, torch.Tensor]:
        y_true = batch.labels
        return {
            "dice": dice_loss(y_pred, y_true, self.masks),
            "focal": focal_loss(y_pred, y_true, self.masks),
        }

    def training_step(self, batch: BatchedTomogramData, batch_idx: int) -> torch.Tensor:
        return sum(self.losses(batch, self.forward(batch)).values())

    def validation_step(self, batch: BatchedTomogramData, batch_idx: int) -> dict[str, torch.Tensor]:
        return self.losses(batch, self.forward(batch))

    def test_step(self, batch: BatchedTomogramData, batch_idx: int) -> dict[str, torch.Tensor]:
        y_pred = self.forward(batch)
        losses = self.losses(batch, y_pred)
        samples, tomo_names = batch.metadata.identifiers
        for i, (sample, tomo_name, data) in enumerate(zip(samples, tomo_names, batch.aux_data["data"])):
            n = int(batch.tomo_sizes[i])
            write_result(
                self.out / sample / tomo_name,
                data=np.asarray(data),
                preds=torch.sigmoid(y_pred[i, :n]).detach().numpy(),
                label=batch.labels[i, :n].numpy(),
            )
        return losses

    def predict_step(self, batch: BatchedTomogramData, batch_idx: int) -> list[np.ndarray]:
        y_pred = torch.sigmoid(self.forward(batch)).detach()
        samples, tomo_names = batch.metadata.identifiers
        preds = []
        for i, (sample, tomo_name, data) in enumerate(zip(samples, tomo_names, batch.aux_data["data"])):
            preds.append(y_pred[i, : int(batch.tomo_sizes[i])].numpy())
            write_result(self.out / sample / tomo_name, data=np.asarray(data), preds=preds[-1])
        return preds


def pipeline_collate(items: list[TomogramData]) -> BatchedTomogramData:
    """The pipeline's own ``collate_fn``: channel-first items, ``aux_data`` a dict, metadata of
    distinct names with ``batch_size=[]``, ``tomo_sizes`` int32, ``min_slices`` a 0-d tensor."""
    sizes = [item.data.shape[1] for item in items]
    channels, height, width = item_shape = (items[0].data.shape[0], *items[0].data.shape[2:])
    tomo_batch = torch.zeros((len(items), max(sizes), *item_shape), dtype=items[0].data.dtype)
    labels = torch.full((len(items), max(sizes), *items[0].label.shape[1:]), -1.0)
    for i, item in enumerate(items):
        tomo_batch[i, : sizes[i]] = item.data.transpose(0, 1)
        labels[i, : sizes[i]] = item.label
    samples = list(dict.fromkeys(item.sample for item in items))
    names = list(dict.fromkeys(item.tomo_name for item in items))
    unique_id = torch.tensor([[samples.index(it.sample), names.index(it.tomo_name)] for it in items])
    metadata = BatchedTomogramMetadata(
        samples=samples, tomo_names=names, unique_id=unique_id, split_id=None, batch_size=[]
    )
    aux_data = {key: [item.aux_data[key] for item in items] for key in items[0].aux_data}
    return BatchedTomogramData(
        tomo_batch=tomo_batch,
        tomo_sizes=torch.tensor(sizes, dtype=torch.int32),
        labels=labels,
        metadata=metadata,
        min_slices=torch.tensor(min(sizes)),
        aux_data=aux_data,
        batch_size=[len(items)],
    )


def pipeline_item(tomogram: Tomogram) -> TomogramData:
    """A tomogram as the pipeline's datasets make one: numpy arrays, channel-first data."""
    return TomogramData(
        sample=tomogram.sample,
        tomo_name=tomogram.name,
        split_id=None,
        data=tomogram.data[None],
        label=tomogram.label,
        aux_data={"data": tomogram.data},
        batch_size=[],
    )


# checks


def expected_labels(group: list[Tomogram], depth: int) -> torch.Tensor:
    labels = torch.full((len(group), depth, SIDE, SIDE), -1.0)
    for i, tomogram in enumerate(group):
        labels[i, : len(tomogram.label)] = torch.from_numpy(tomogram.label)
    return labels


def check_batch_reaching_the_model(
    batch: BatchedTomogramData, group: list[Tomogram], model_input: torch.Tensor, features: bool = False
) -> None:
    """What the model and losses get is what the files hold, padded, and the batch is as the spec has it."""
    sizes = [len(t.label) for t in group]
    depth = max(sizes)
    assert batch.tomo_sizes.tolist() == sizes and batch.tomo_sizes.dtype == torch.int32
    assert batch.min_slices == min(sizes) and batch.num_slices == depth
    assert batch.metadata.identifiers == ([t.sample for t in group], [t.name for t in group])
    assert batch.labels.dtype == torch.float32
    assert torch.equal(batch.labels, expected_labels(group, depth))
    channels = FEATURES if features else 1
    side = SIDE // PATCH if features else SIDE
    assert model_input.shape == (len(group), channels, depth, side, side)
    assert model_input.dtype == (torch.float16 if features else torch.float32)
    for i, tomogram in enumerate(group):
        n = sizes[i]
        values = tomogram.features if features else tomogram.data[None]
        np.testing.assert_array_equal(model_input[i, :, :n].numpy(), values)
        assert (model_input[i, :, n:] == 0).all()
        np.testing.assert_array_equal(np.asarray(batch.aux_data["data"][i]), tomogram.data)
    # flat_tomo_batch is the reshape of the batch and index_to_flat_batch indexes it
    flat = batch.flat_tomo_batch
    assert flat.shape == (len(group) * depth, *batch.tomo_batch.shape[2:])
    assert torch.equal(flat.view(batch.tomo_batch.shape), batch.tomo_batch)
    for n in range(depth):
        assert torch.equal(flat[batch.index_to_flat_batch(n)], batch.tomo_batch[batch.tomo_sizes > n, n])


def groups_of(tomograms: list[Tomogram], size: int) -> list[list[Tomogram]]:
    return [tomograms[i : i + size] for i in range(0, len(tomograms), size)]


def check_written(out: Path, tomograms: list[Tomogram], with_label: bool) -> None:
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == sorted(f"{t.sample}/{t.name}" for t in tomograms)
    for tomogram in tomograms:
        with h5py.File(out / tomogram.sample / tomogram.name, "r") as file:
            np.testing.assert_array_equal(file["data"][()], tomogram.data)
            preds = file["preds"][()]
            assert preds.shape == tomogram.label.shape and preds.min() >= 0 and preds.max() <= 1
            if with_label:
                np.testing.assert_array_equal(file["label"][()], tomogram.label)


# the tests


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_train_validate_test_and_predict_steps(
    tomograms: list[Tomogram], tmp_path: Path, batch_size: int
) -> None:
    torch.manual_seed(0)
    segmenter = Segmenter(UNet3D(), tmp_path / "test")
    optimizer = torch.optim.SGD(segmenter.net.parameters(), lr=0.1)
    dataset = TomogramDataset([t.file for t in tomograms], label="mito")
    groups = groups_of(tomograms, batch_size)
    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=collate_tomograms)
    for step, (batch, group) in enumerate(zip(loader, groups, strict=True)):
        loss = segmenter.training_step(batch, step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
        check_batch_reaching_the_model(batch, group, segmenter.inputs[-1])
        # each loss masked exactly the voxels annotated in the files, padding left out
        for mask in segmenter.masks[-2:]:
            assert torch.equal(mask, expected_labels(group, batch.num_slices) > -1)
    for step, batch in enumerate(loader):
        losses = segmenter.validation_step(batch, step)
        assert set(losses) == {"dice", "focal"} and all(torch.isfinite(v) for v in losses.values())
        segmenter.test_step(batch, step)
    check_written(tmp_path / "test", tomograms, with_label=True)
    segmenter.out = tmp_path / "predict"
    predictions = [
        preds for step, batch in enumerate(loader) for preds in segmenter.predict_step(batch, step)
    ]
    assert [p.shape for p in predictions] == [t.label.shape for t in tomograms]
    check_written(tmp_path / "predict", tomograms, with_label=False)


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_dino_features_with_labels_at_full_resolution(
    tomograms: list[Tomogram], tmp_path: Path, batch_size: int
) -> None:
    hdf5 = [t for t in tomograms if t.features is not None]
    segmenter = Segmenter(UNet3D(FEATURES, upsample=PATCH), tmp_path)
    dataset = TomogramDataset(
        [t.file for t in hdf5], label="mito", data_key="dino_features", input_key="data"
    )
    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=collate_tomograms)
    for step, (batch, group) in enumerate(zip(loader, groups_of(hdf5, batch_size), strict=True)):
        assert batch.tomo_batch.dtype == torch.float16
        loss = segmenter.training_step(batch, step)
        assert torch.isfinite(loss)
        check_batch_reaching_the_model(batch, group, segmenter.inputs[-1], features=True)
        segmenter.test_step(batch, step)
    check_written(tmp_path, hdf5, with_label=True)


def test_a_crop_of_dino_features_reads_its_label_at_full_resolution(tomograms: list[Tomogram]) -> None:
    tomogram = tomograms[0]
    dataset = TomogramDataset([tomogram.file], label="mito", crop=(3, 1), data_key="dino_features", seed=2)
    seen = set()
    for _ in range(12):
        item = dataset[0]
        z, y, x = item.aux_data["crop_origin"]
        seen.add((z, y, x))
        assert item.data.shape == (FEATURES, 3, 1, 1) and item.data.dtype == torch.float16
        np.testing.assert_array_equal(
            item.data.numpy(), tomogram.features[:, z : z + 3, y : y + 1, x : x + 1]
        )
        box = (slice(z, z + 3), slice(y * PATCH, (y + 1) * PATCH), slice(x * PATCH, (x + 1) * PATCH))
        np.testing.assert_array_equal(item.label.numpy(), tomogram.label[box])
    assert len(seen) > 3


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_the_pipelines_collate_takes_our_items(
    tomograms: list[Tomogram], tmp_path: Path, batch_size: int
) -> None:
    segmenter = Segmenter(UNet3D(), tmp_path)
    dataset = TomogramDataset([t.file for t in tomograms], label="mito")
    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=pipeline_collate)
    for step, (batch, group) in enumerate(zip(loader, groups_of(tomograms, batch_size), strict=True)):
        assert type(batch.min_slices) is int
        segmenter.training_step(batch, step)
        check_batch_reaching_the_model(batch, group, segmenter.inputs[-1])
        segmenter.test_step(batch, step)
    check_written(tmp_path, tomograms, with_label=True)


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_our_collate_takes_the_pipelines_items(
    tomograms: list[Tomogram], tmp_path: Path, batch_size: int
) -> None:
    segmenter = Segmenter(UNet3D(), tmp_path)
    for step, group in enumerate(groups_of(tomograms, batch_size)):
        batch = collate_tomograms([pipeline_item(t) for t in group])
        segmenter.training_step(batch, step)
        check_batch_reaching_the_model(batch, group, segmenter.inputs[-1])
        segmenter.test_step(batch, step)
    check_written(tmp_path, tomograms, with_label=True)


def test_uint8_scaling_is_a_parameter(tomograms: list[Tomogram]) -> None:
    tomogram = tomograms[1]
    scaled = TomogramDataset([tomogram.file])[0]
    raw = TomogramDataset([tomogram.file], scale_uint8=False)[0]
    np.testing.assert_allclose(scaled.data[0].numpy(), tomogram.data, rtol=0, atol=0)
    np.testing.assert_array_equal(raw.data[0].numpy(), np.round(tomogram.data * 255))
    assert raw.data.max() > 1 and scaled.data.max() <= 1


def test_lightning_fit_test_and_predict(tomograms: list[Tomogram], tmp_path: Path) -> None:
    """One epoch of each through Lightning's Trainer on CPU, over TomogramDataset and collate_tomograms."""
    import lightning

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = UNet3D()
            self.steps = Segmenter(self.net, tmp_path / "lightning")

        def training_step(self, batch: BatchedTomogramData, batch_idx: int) -> torch.Tensor:
            loss = self.steps.training_step(batch, batch_idx)
            self.log("train_loss", loss, batch_size=batch.num_tomos)
            return loss

        def validation_step(self, batch: BatchedTomogramData, batch_idx: int) -> None:
            losses = self.steps.validation_step(batch, batch_idx)
            self.log_dict({f"val_{k}": v for k, v in losses.items()}, batch_size=batch.num_tomos)

        def test_step(self, batch: BatchedTomogramData, batch_idx: int) -> None:
            losses = self.steps.test_step(batch, batch_idx)
            self.log_dict({f"test_{k}": v for k, v in losses.items()}, batch_size=batch.num_tomos)

        def predict_step(self, batch: BatchedTomogramData, batch_idx: int) -> list[np.ndarray]:
            return self.steps.predict_step(batch, batch_idx)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    def loader(crop: tuple[int, int] | None, shuffle: bool = False) -> DataLoader:
        dataset = TomogramDataset([t.file for t in tomograms], label="mito", crop=crop, seed=0)
        return DataLoader(dataset, batch_size=2, shuffle=shuffle, collate_fn=collate_tomograms)

    module = Module()
    trainer = lightning.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    before = [p.detach().clone() for p in module.parameters()]
    trainer.fit(module, loader((2, 16), shuffle=True), loader(None))
    assert trainer.current_epoch == 1 and trainer.global_step == 3
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))
    assert torch.isfinite(trainer.callback_metrics["val_dice"])
    (results,) = trainer.test(module, loader(None), verbose=False)
    assert set(results) == {"test_dice", "test_focal"}
    check_written(tmp_path / "lightning", tomograms, with_label=True)
    predictions = trainer.predict(module, loader(None))
    flat = [preds for batch in predictions for preds in batch]
    assert [p.shape for p in flat] == [t.label.shape for t in tomograms]


# the pipeline's writer callbacks, and its DINO feature extraction, through Lightning


def lightning_module(net: torch.nn.Module, step: object) -> object:
    """A LightningModule whose test and predict steps are ``step(module, batch)``."""
    import lightning

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def test_step(self, batch: BatchedTomogramData, batch_idx: int) -> object:
            return step(self, batch)

        def predict_step(self, batch: BatchedTomogramData, batch_idx: int) -> object:
            return step(self, batch)

    return Module()


def trainer(tmp_path: Path, callbacks: list) -> object:
    import lightning

    return lightning.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=callbacks,
    )


def writer_callbacks(out: Path) -> tuple[object, object, object]:
    """The pipeline's ``TestPredictionWriter``, ``CsvWriter`` and ``PredictionWriter``, as it writes them:
    numpy on ``aux_data["data"]`` (``.astype``, HDF5 datasets of the array's dtype), one file per tomogram."""
    import lightning
    from lightning.pytorch.callbacks import BasePredictionWriter

    def write_hdf5(path: Path, data: np.ndarray, **arrays: np.ndarray) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(path, "w") as file:
            file.create_dataset("data", shape=data.shape, dtype=data.dtype, data=data, compression="gzip")
            for key, value in arrays.items():
                file.create_dataset(key, data=value, dtype=value.dtype)

    class TestPredictionWriter(lightning.Callback):
        def on_test_batch_end(self, trainer, module, result, batch, batch_idx, dataloader_idx=0) -> None:
            for i, (sample, name) in enumerate(zip(result.samples, result.tomo_names)):
                write_hdf5(
                    out / "test" / sample / f"{Path(name).stem}.hdf",
                    result.aux_data["data"][i],
                    preds=result.preds[i].astype(np.float16),
                    label=result.label[i].astype(np.int8),
                )

    class CsvWriter(lightning.Callback):
        def __init__(self) -> None:
            self.rows: list[dict[str, object]] = []

        def on_test_batch_end(self, trainer, module, result, batch, batch_idx, dataloader_idx=0) -> None:
            for i, (sample, name) in enumerate(zip(result.samples, result.tomo_names)):
                label, preds = result.label[i], result.preds[i].astype(np.float16)
                annotated = label > -1
                p, t = preds[annotated] > 0.5, label[annotated] == 1
                dice = (2 * (p & t).sum() + 1) / (p.sum() + t.sum() + 1)
                data = result.aux_data["data"][i].astype(np.float64)
                row = {"sample": sample, "tomo_name": name, "slices": len(label), "dice": float(dice)}
                self.rows.append({**row, "data_mean": float(data.mean()), **result.losses})

        def on_test_end(self, trainer, module) -> None:
            with open(out / "metrics.csv", "w", newline="") as stream:
                writer = csv.DictWriter(stream, fieldnames=list(self.rows[0]))
                writer.writeheader()
                writer.writerows(self.rows)

    class PredictionWriter(BasePredictionWriter):
        def __init__(self) -> None:
            super().__init__(write_interval="batch")

        def write_on_batch_end(
            self, trainer, module, result, indices, batch, batch_idx, dataloader_idx
        ) -> None:
            for i, (sample, name) in enumerate(zip(result.samples, result.tomo_names)):
                path = out / "predict" / sample / f"{Path(name).stem}.hdf"
                write_hdf5(path, result.aux_data["data"][i], preds=result.preds[i].astype(np.float16))

    return TestPredictionWriter(), CsvWriter(), PredictionWriter()


def segment(module: object, batch: BatchedTomogramData) -> BatchedModelResult:
    """The pipeline's evaluation step: predictions and losses of a batch as a ``BatchedModelResult``."""
    y_pred = module.net(batch.tomo_batch.permute(0, 2, 1, 3, 4))
    losses = {
        "dice_loss": float(dice_loss(y_pred, batch.labels, [])),
        "focal_loss": float(focal_loss(y_pred, batch.labels, [])),
    }
    return model_result(batch, torch.sigmoid(y_pred), losses=losses)


def test_lightning_test_and_predict_with_the_pipelines_writers(
    tomograms: list[Tomogram], tmp_path: Path
) -> None:
    """``Trainer.test`` and ``Trainer.predict`` with the writer callbacks, on HDF5 and MRC tomograms of
    different depths, two a batch: one HDF5 file per tomogram and a row of metrics each, as computed."""
    torch.manual_seed(0)
    module = lightning_module(UNet3D(), segment)
    out = tmp_path / "out"
    test_writer, csv_writer, prediction_writer = writer_callbacks(out)
    loader = DataLoader(
        TomogramDataset([t.file for t in tomograms], label="mito"), batch_size=2, collate_fn=collate_tomograms
    )
    for batch in loader:  # the inputs reach the writers as the pipeline's datasets give them
        assert all(type(data) is np.ndarray and data.dtype == np.float32 for data in batch.aux_data["data"])
    trainer(tmp_path, [test_writer, csv_writer]).test(module, loader, verbose=False)
    results = trainer(tmp_path, [prediction_writer]).predict(module, loader)
    predictions = [preds for result in results for preds in result.preds]
    assert [p.shape for p in predictions] == [t.label.shape for t in tomograms]

    for kind in ("test", "predict"):
        written = sorted(str(p.relative_to(out / kind)) for p in (out / kind).rglob("*") if p.is_file())
        assert written == sorted(f"{t.sample}/{Path(t.name).stem}.hdf" for t in tomograms)
    with open(out / "metrics.csv", newline="") as stream:
        rows = {(row["sample"], row["tomo_name"]): row for row in csv.DictReader(stream)}
    assert len(rows) == len(tomograms)
    for tomogram, expected_preds in zip(tomograms, predictions):
        stem = f"{tomogram.sample}/{Path(tomogram.name).stem}.hdf"
        with h5py.File(out / "test" / stem, "r") as file:
            data, preds, label = file["data"][()], file["preds"][()], file["label"][()]
        assert (data.dtype, preds.dtype, label.dtype) == (np.float32, np.float16, np.int8)
        np.testing.assert_array_equal(data, tomogram.data)
        np.testing.assert_array_equal(label, tomogram.label)
        assert preds.shape == tomogram.label.shape and preds.min() >= 0 and preds.max() <= 1
        with h5py.File(out / "predict" / stem, "r") as file:
            assert file["data"].dtype == np.float32 and file["preds"].dtype == np.float16
            np.testing.assert_array_equal(file["data"][()], tomogram.data)
            np.testing.assert_array_equal(file["preds"][()], expected_preds.astype(np.float16))
            np.testing.assert_array_equal(file["preds"][()], preds)  # the same network, the same batches
        row = rows[(tomogram.sample, tomogram.name)]
        annotated = tomogram.label > -1
        p, t = preds[annotated] > 0.5, tomogram.label[annotated] == 1
        assert float(row["dice"]) == float((2 * (p & t).sum() + 1) / (p.sum() + t.sum() + 1))
        assert int(row["slices"]) == len(tomogram.label)
        assert float(row["data_mean"]) == pytest.approx(tomogram.data.astype(np.float64).mean(), rel=1e-12)
        assert set(row) == {"sample", "tomo_name", "slices", "dice", "data_mean", "dice_loss", "focal_loss"}


RESIZED = 48
"""The side the DINO path resizes a tomogram's slices to: a multiple of 16, other than the tomogram's."""


class DinoInputs(torch.utils.data.Dataset):
    """The pipeline's dataset for DINO feature extraction: each tomogram (read here by TomogramDataset)
    resized to ``[D, 1, 48, 48]``, depth-first, with a dummy bool label of its channel-first shape
    ``[1, D, H, W]`` and its input as a numpy array."""

    def __init__(self, files: list[FileData]):
        self.tomograms = TomogramDataset(files)

    def __len__(self) -> int:
        return len(self.tomograms)

    def __getitem__(self, index: int) -> TomogramData:
        item = self.tomograms[index]
        resized = F.interpolate(item.data.transpose(0, 1), size=(RESIZED, RESIZED), mode="bilinear")
        return TomogramData(
            sample=item.sample,
            tomo_name=item.tomo_name,
            split_id=None,
            data=resized,
            label=np.zeros(item.data.shape, bool),
            aux_data={"data": item.aux_data["data"]},
            batch_size=[],
        )


def test_dino_feature_extraction_and_its_features_through_collate_tomograms(
    tomograms: list[Tomogram], tmp_path: Path
) -> None:
    """The DINO path, as the pipeline runs it: depth-first resized tomograms through collate_tomograms
    into a model of ``[B*D, 1, H', W']`` (``Trainer.predict``), the features written per tomogram; then
    the features read back, handed in as ``[D, 1536, h, w]`` with their labels, batched again, into a
    head of ``[B*D, 1536, h, w]``."""
    torch.manual_seed(1)
    dino = torch.nn.Conv2d(1, FEATURES, PATCH, stride=PATCH)  # one feature vector per 16 x 16 patch
    out = tmp_path / "features"
    side = RESIZED // PATCH

    def extract(module: object, batch: BatchedTomogramData) -> list[np.ndarray]:
        assert batch.tomo_batch.shape[2:] == (1, RESIZED, RESIZED)
        features = module.net(batch.flat_tomo_batch)  # [B*D, 1536, 3, 3]
        features = features.view(*batch.tomo_batch.shape[:2], *features.shape[1:])
        return [features[i, :n].detach().numpy() for i, n in enumerate(batch.tomo_sizes.tolist())]

    from lightning.pytorch.callbacks import BasePredictionWriter

    class FeatureWriter(BasePredictionWriter):
        """The pipeline's writer of features: the input and ``dino_features`` ``[1536, D, h, w]`` float16."""

        def __init__(self) -> None:
            super().__init__(write_interval="batch")

        def write_on_batch_end(
            self, trainer, module, features, indices, batch, batch_idx, dataloader_idx
        ) -> None:
            samples, names = batch.metadata.identifiers
            for sample, name, data, values in zip(samples, names, batch.aux_data["data"], features):
                (out / sample).mkdir(parents=True, exist_ok=True)
                with h5py.File(out / sample / f"{Path(name).stem}.hdf", "w") as file:
                    file.create_dataset("data", data=data, dtype=data.dtype)
                    file.create_dataset("dino_features", data=values.transpose(1, 0, 2, 3).astype(np.float16))

    loader = DataLoader(DinoInputs([t.file for t in tomograms]), batch_size=2, collate_fn=collate_tomograms)
    results = trainer(tmp_path, [FeatureWriter()]).predict(lightning_module(dino, extract), loader)
    assert [f.shape for batch in results for f in batch] == [
        (len(t.label), FEATURES, side, side) for t in tomograms
    ]
    files = [FileData(out / t.sample / f"{Path(t.name).stem}.hdf") for t in tomograms]
    assert sorted(out.rglob("*.hdf")) == sorted(f.tomo_path for f in files)
    items = []
    for tomogram, file in zip(tomograms, files):
        resized = F.interpolate(
            torch.from_numpy(tomogram.data)[:, None], size=(RESIZED, RESIZED), mode="bilinear"
        )
        expected = dino(resized).detach().numpy().transpose(1, 0, 2, 3)  # each tomogram alone
        with h5py.File(file.tomo_path, "r") as written:
            assert written["data"].dtype == np.float32 and written["dino_features"].dtype == np.float16
            np.testing.assert_array_equal(written["data"][()], tomogram.data)
            np.testing.assert_allclose(written["dino_features"][()], expected, rtol=2e-3, atol=2e-3)
        # the features as the pipeline's datasets read them, handed in depth-first with their labels
        item = TomogramDataset([file], data_key="dino_features", input_key="data")[0]
        assert item.data.shape == (FEATURES, len(tomogram.label), side, side)
        items.append(
            TomogramData(
                sample=item.sample,
                tomo_name=item.tomo_name,
                split_id=None,
                data=item.data.transpose(0, 1).numpy(),
                label=tomogram.label,
                aux_data=item.aux_data,
                batch_size=[],
            )
        )
    head = torch.nn.Conv2d(FEATURES, 1, 1)
    for group, batch_items in zip(groups_of(tomograms, 3), groups_of(items, 3)):
        batch = collate_tomograms(batch_items)
        depth = max(len(t.label) for t in group)
        assert batch.tomo_batch.shape == (3, depth, FEATURES, side, side)
        assert batch.tomo_batch.dtype == torch.float16
        for i, item in enumerate(batch_items):
            n = len(group[i].label)
            assert torch.equal(batch.tomo_batch[i, :n], item.data) and (batch.tomo_batch[i, n:] == 0).all()
            np.testing.assert_array_equal(batch.aux_data["data"][i], group[i].data)
        assert torch.equal(batch.labels, expected_labels(group, depth))
        logits = F.interpolate(head(batch.flat_tomo_batch.float()), size=(SIDE, SIDE), mode="nearest")
        loss = dice_loss(logits.view(batch.labels.shape), batch.labels, [])
        loss.backward()
        assert torch.isfinite(loss) and head.weight.grad.abs().sum() > 0
