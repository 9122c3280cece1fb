"""3-D augmentations: each gives what it says on a known volume, and the same generator the same result."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage

import vitrio as vio


def volumes(rows: int = 6, shape: tuple[int, int, int] = (5, 7, 7), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, *shape)).astype(np.float32)


def test_a_flip_of_each_row_is_numpys_flip_of_the_axes_it_drew() -> None:
    batch = volumes()
    flipped = vio.data.RandomFlip()(batch, rng=np.random.default_rng(1))
    drawn = np.random.default_rng(1).random((len(batch), 3)) < 0.5
    assert drawn.any() and not drawn.all()
    for row, axes in enumerate(drawn):
        expected = np.flip(batch[row], axis=tuple(np.flatnonzero(axes))) if axes.any() else batch[row]
        np.testing.assert_array_equal(flipped[row], expected)


def test_a_certain_flip_of_y_is_numpys_flip_for_every_row() -> None:
    batch = volumes()
    flipped = vio.data.RandomFlip(axes=(1,), probability=1.0)(batch, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(flipped, np.flip(batch, axis=2))


def test_quarter_turns_are_numpys_rot90_in_y_and_x() -> None:
    batch = volumes(rows=12, shape=(4, 6, 6))
    turned = vio.data.RandomRot90()(batch, rng=np.random.default_rng(3))
    turns = np.random.default_rng(3).integers(0, 4, size=12)
    assert len(set(turns.tolist())) == 4
    for row, turn in enumerate(turns):
        np.testing.assert_array_equal(turned[row], np.rot90(batch[row], turn, axes=(1, 2)))
    with pytest.raises(ValueError, match="square sections"):
        vio.data.RandomRot90()(volumes(shape=(4, 6, 8)))


@pytest.mark.parametrize("quarter", [1, 2, 3])
def test_a_beam_rotation_by_quarter_turns_is_rot90(quarter: int) -> None:
    batch = volumes(shape=(3, 9, 9))
    turned = vio.data.RandomBeamRotation(degrees=90.0 * quarter)(batch)
    np.testing.assert_allclose(turned, np.rot90(batch, quarter, axes=(2, 3)), atol=1e-5)


def test_a_beam_rotation_by_any_angle_interpolates_as_scipy_does() -> None:
    batch = volumes(rows=1, shape=(3, 21, 21))
    turned = vio.data.RandomBeamRotation(degrees=30.0)(batch)
    # scipy turns about the middle, (20 / 2), which odd sides share with extent // 2
    expected = scipy.ndimage.rotate(batch[0], 30.0, axes=(2, 1), reshape=False, order=1, mode="nearest")
    inner = (slice(None), slice(4, -4), slice(4, -4))  # away from the corners the edge fills
    np.testing.assert_allclose(turned[0][inner], expected[inner], atol=1e-4)


def test_a_beam_rotation_keeps_the_centre_voxel_of_an_even_box() -> None:
    batch = np.zeros((1, 2, 8, 8), np.float32)
    batch[0, :, 4, 4] = 1.0
    turned = vio.data.RandomBeamRotation()(batch, rng=np.random.default_rng(5))
    np.testing.assert_allclose(turned[0, :, 4, 4], 1.0, atol=1e-6)


def test_intensity_scales_and_offsets_each_row_within_its_ranges() -> None:
    batch = np.ones((50, 2, 3, 3), np.float32)
    out = vio.data.RandomIntensity(scale=(2.0, 3.0), offset=(-1.0, 1.0))(batch, rng=np.random.default_rng(0))
    rng = np.random.default_rng(0)
    scale, offset = rng.uniform(2, 3, 50), rng.uniform(-1, 1, 50)
    np.testing.assert_allclose(out[:, 0, 0, 0], scale + offset, rtol=1e-6)
    assert (out == out[:, :1, :1, :1]).all()


def test_noise_has_the_standard_deviation_asked_for() -> None:
    batch = np.full((4, 32, 32, 32), 5.0, np.float32)
    noisy = vio.data.RandomGaussianNoise(std=0.3)(batch, rng=np.random.default_rng(2))
    residual = noisy - batch
    np.testing.assert_allclose(residual.std(axis=(1, 2, 3)), 0.3, rtol=0.03)
    np.testing.assert_allclose(residual.mean(axis=(1, 2, 3)), 0.0, atol=0.01)


def test_a_low_pass_leaves_no_frequency_past_its_cutoff_and_keeps_the_mean() -> None:
    batch = volumes(rows=3, shape=(16, 16, 16))
    out = vio.data.RandomLowPass(cutoff=0.2, probability=1.0)(batch)
    spectrum = np.abs(np.fft.fftn(out, axes=(1, 2, 3)))
    f = np.meshgrid(*[np.fft.fftfreq(16)] * 3, indexing="ij")
    beyond = np.sqrt(sum(a**2 for a in f)) > 0.2
    assert spectrum[:, beyond].max() < 1e-3 * spectrum.max()
    np.testing.assert_allclose(out.mean(axis=(1, 2, 3)), batch.mean(axis=(1, 2, 3)), atol=1e-5)
    within = ~beyond
    original = np.abs(np.fft.fftn(batch, axes=(1, 2, 3)))
    np.testing.assert_allclose(spectrum[:, within], original[:, within], rtol=1e-3, atol=1e-3)


def test_a_low_pass_of_probability_zero_changes_nothing() -> None:
    batch = volumes()
    np.testing.assert_array_equal(vio.data.RandomLowPass(probability=0.0)(batch), batch)


def test_a_composition_hands_its_generator_to_each_step_and_keeps_the_other_fields() -> None:
    augment = vio.data.Compose(
        vio.data.RandomFlip(),
        vio.data.RandomRot90(),
        vio.data.RandomBeamRotation(),
        vio.data.RandomIntensity(),
        vio.data.RandomGaussianNoise(),
        vio.data.RandomLowPass(),
    )
    batch = {"image": volumes(), "label": np.arange(6)}
    first = augment(batch, rng=np.random.default_rng(42))
    second = augment(batch, rng=np.random.default_rng(42))
    other = augment(batch, rng=np.random.default_rng(43))
    np.testing.assert_array_equal(first["image"], second["image"])
    assert not np.array_equal(first["image"], other["image"])
    assert first["label"] is batch["label"]
    assert first["image"].dtype == np.float32 and first["image"].shape == batch["image"].shape
    by_hand, generator = batch["image"], np.random.default_rng(42)
    for step in augment.steps:
        by_hand = step.augment(by_hand, generator)
    np.testing.assert_array_equal(first["image"], by_hand)
    seeded = [vio.data.RandomGaussianNoise(seed=1)(batch)["image"] for _ in range(2)]
    np.testing.assert_array_equal(seeded[0], seeded[1])


def test_a_data_loader_gives_each_batch_its_own_generator_and_an_epoch_again_the_same() -> None:
    data = vio.data.Dataset({"image": volumes(rows=8)})
    augment = vio.data.Compose(vio.data.RandomFlip(), vio.data.RandomGaussianNoise(std=0.1))

    def epoch(seed: int) -> list[np.ndarray]:
        return [batch["image"] for batch in vio.data.DataLoader(data, 4, seed=seed, transform=augment)]

    first, again = epoch(3), epoch(3)
    for one, other in zip(first, again):
        np.testing.assert_array_equal(one, other)
    assert not np.array_equal(first[0], first[1])


def test_augmentations_refuse_what_is_not_a_batch_of_volumes() -> None:
    with pytest.raises(ValueError, match=r"\(rows, \.\.\., z, y, x\)"):
        vio.data.RandomFlip()(np.zeros((4, 4, 4), np.float32))
    with pytest.raises(TypeError, match="numpy arrays and tensors in host memory, not list"):
        vio.data.RandomFlip()([np.zeros((4, 4, 4))])
    with pytest.raises(KeyError, match="no field 'image'"):
        vio.data.RandomFlip()({"volume": volumes()})


def test_apply_draws_from_the_generator_it_is_given_as_a_step_of_a_composition() -> None:
    batch = volumes()
    flip = vio.data.RandomFlip(seed=0)
    given = flip.apply(batch, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(given, flip(batch, rng=np.random.default_rng(8)))
    np.testing.assert_array_equal(flip.apply(batch), vio.data.RandomFlip(seed=0).apply(batch))


def test_a_tensor_in_host_memory_is_augmented_as_its_numpy_array() -> None:
    import torch

    batch = volumes()
    augment = vio.data.Compose(vio.data.RandomRot90(), vio.data.RandomGaussianNoise())
    tensor = augment(torch.from_numpy(batch), rng=np.random.default_rng(4))
    assert isinstance(tensor, torch.Tensor)
    np.testing.assert_array_equal(tensor.numpy(), augment(batch, rng=np.random.default_rng(4)))
    loader = vio.data.DataLoader(vio.data.Dataset({"image": batch}), 3, output="torch", transform=augment)
    assert all(isinstance(b["image"], torch.Tensor) and b["image"].shape == (3, 5, 7, 7) for b in loader)


def test_the_noise_is_gaussian() -> None:
    batch = np.zeros((4, 32, 32, 32), np.float32)
    noise = vio.data.RandomGaussianNoise(std=1.0)(batch, rng=np.random.default_rng(0))
    assert abs(np.mean(np.abs(noise) < 1) - 0.6827) < 0.005  # within one deviation: 68.27 %
    assert abs(np.mean(noise**4) / np.mean(noise**2) ** 2 - 3) < 0.15  # a normal's kurtosis


CHANCES = [
    lambda p: vio.data.RandomRot90(probability=p),
    lambda p: vio.data.RandomBeamRotation(degrees=(10, 80), probability=p),
    lambda p: vio.data.RandomIntensity(scale=(2, 3), probability=p),
    lambda p: vio.data.RandomGaussianNoise(std=(0.5, 1), probability=p),
]


@pytest.mark.parametrize("make", CHANCES, ids=["rot90", "beam", "intensity", "noise"])
def test_a_row_is_augmented_with_the_probability_asked_and_the_others_are_left(make) -> None:
    batch = volumes(rows=400, shape=(2, 4, 4))
    out = make(0.25)(batch, rng=np.random.default_rng(5))
    chosen = np.random.default_rng(5).random(len(batch)) < 0.25  # the choice is drawn first
    assert 0.18 < chosen.mean() < 0.32  # 100 of 400 expected; a binomial's deviation is 8.7
    np.testing.assert_array_equal(out[~chosen], batch[~chosen])  # rows not drawn are as they were
    # the rows drawn get what the augmentation at probability 1 gives them, drawn after the choice
    generator = np.random.default_rng(5)
    generator.random(len(batch))
    np.testing.assert_array_equal(out[chosen], make(1.0)(batch[chosen], rng=generator))
    np.testing.assert_array_equal(make(0.0)(batch, rng=np.random.default_rng(5)), batch)
    assert make(0.25) == make(0.25) and make(0.25) != make(0.5)
    with pytest.raises(ValueError, match="probability"):
        make(1.5)
