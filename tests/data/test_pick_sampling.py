"""Background boxes away from every pick, balanced classes that resume, splits keeping tomograms whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vitrio as vio

EXTENTS = {"a": (30, 40, 50), "b": (20, 60, 30), "c": (25, 25, 25)}
BOX = (8, 6, 10)


def random_picks(seed: int = 0, count: int = 12) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.integers(0, extents, size=(count, 3)) for name, extents in EXTENTS.items()}


def test_background_centres_keep_their_distance_from_every_pick_and_their_box_inside() -> None:
    picks = random_picks()
    centres, tomograms = vio.data.background_centres(picks, EXTENTS, BOX, 90, 6.0, seed=3, epoch=0)
    assert len(centres) == len(tomograms) == 90
    assert {name: tomograms.count(name) for name in EXTENTS} == {"a": 30, "b": 30, "c": 30}
    box = np.asarray(BOX)
    for centre, name in zip(centres, tomograms):
        nearest = min(float(np.sqrt(((centre - pick) ** 2).sum())) for pick in picks[name])
        assert nearest >= 6.0, (centre, name)
        start = centre - box // 2
        assert (start >= 0).all() and (start + box <= np.asarray(EXTENTS[name])).all()


def test_background_centres_are_the_same_for_a_seed_and_epoch_and_differ_between_epochs() -> None:
    picks = random_picks()
    first = vio.data.background_centres(picks, EXTENTS, BOX, 20, 4.0, seed=11, epoch=2)
    again = vio.data.background_centres(picks, EXTENTS, BOX, 20, 4.0, seed=11, epoch=2)
    other_epoch = vio.data.background_centres(picks, EXTENTS, BOX, 20, 4.0, seed=11, epoch=3)
    other_seed = vio.data.background_centres(picks, EXTENTS, BOX, 20, 4.0, seed=12, epoch=2)
    assert first[0].tolist() == again[0].tolist() and first[1] == again[1]
    assert first[0].tolist() != other_epoch[0].tolist()
    assert first[0].tolist() != other_seed[0].tolist()


def test_a_tomogram_without_room_for_its_background_is_named() -> None:
    crowded = {"c": np.array([[12, 12, 12]])}
    with pytest.raises(ValueError, match="tomogram 'c': found room for only 0 of 5 background boxes"):
        vio.data.background_centres(crowded, {"c": EXTENTS["c"]}, BOX, 5, 40.0, seed=0)
    with pytest.raises(ValueError, match="cannot hold a box"):
        vio.data.background_centres(crowded, {"c": (4, 25, 25)}, BOX, 1, 0.0, seed=0)


def labels_of(counts: list[int], seed: int = 0) -> np.ndarray:
    labels = np.concatenate([np.full(count, label) for label, count in enumerate(counts)])
    return np.random.default_rng(seed).permutation(labels)


def test_a_balanced_epoch_draws_each_class_as_often_within_one() -> None:
    labels = labels_of([50, 7, 3, 20])
    sampler = vio.data.BalancedBatchSampler(labels, 8, seed=5)
    for _ in range(3):
        rows = np.concatenate(list(sampler))
        assert len(rows) == len(labels)
        counts = np.bincount(labels[rows], minlength=4)
        assert counts.max() - counts.min() <= 1, counts
        assert counts.sum() == 80
    # a class drawn more often than it has rows takes each row once before any twice
    rows = sampler.rows(7)
    smallest = rows[labels[rows] == 2]
    assert np.bincount(smallest, minlength=len(labels))[np.flatnonzero(labels == 2)].tolist() in (
        [7, 7, 6],
        [7, 6, 7],
        [6, 7, 7],
    )


def test_balanced_weights_set_the_share_of_each_class() -> None:
    labels = labels_of([50, 7, 3, 20])
    sampler = vio.data.BalancedBatchSampler(labels, 10, weights=[2, 1, 0, 1], samples=100, seed=1)
    rows = np.concatenate(list(sampler))
    assert np.bincount(labels[rows], minlength=4).tolist() == [50, 25, 0, 25] == sampler.counts.tolist()
    with pytest.raises(ValueError, match=r"classes \[4\] have a weight but no rows"):
        vio.data.BalancedBatchSampler(labels, 10, weights=[1, 1, 1, 1, 1])


def test_balanced_epochs_are_the_seeds_own_and_differ() -> None:
    labels = labels_of([30, 10])
    one, two = (vio.data.BalancedBatchSampler(labels, 4, seed=9) for _ in range(2))
    first = [batch.tolist() for batch in one]
    assert first == [batch.tolist() for batch in two]
    assert first != [batch.tolist() for batch in one]


def test_balanced_shards_share_out_each_epoch() -> None:
    labels = labels_of([30, 10, 5])
    shards = [vio.data.BalancedBatchSampler(labels, 4, seed=2, shard=(rank, 3)) for rank in range(3)]
    whole = vio.data.BalancedBatchSampler(labels, 4, seed=2)
    dealt = np.concatenate([np.concatenate(list(shard)) for shard in shards])
    assert sorted(dealt.tolist()) == sorted(whole.order(0).tolist())


def test_a_balanced_sampler_resumes_from_its_state_with_the_batches_left() -> None:
    labels = labels_of([40, 9, 4])
    sampler = vio.data.BalancedBatchSampler(labels, 5, seed=None)
    batches = iter(sampler)
    for _ in range(3):
        next(batches)
    state = sampler.state_dict()
    rest = [batch.tolist() for batch in batches]
    resumed = vio.data.BalancedBatchSampler(labels, 5)
    resumed.load_state_dict(state)
    assert [batch.tolist() for batch in resumed] == rest
    with pytest.raises(ValueError, match="counts"):
        vio.data.BalancedBatchSampler(labels, 5, weights=[1, 2, 1]).load_state_dict(state)


def test_a_data_loader_resumes_a_balanced_epoch_where_it_stopped() -> None:
    labels = labels_of([40, 9, 4])
    dataset = vio.data.Dataset({"label": labels})

    def loader() -> vio.data.DataLoader:
        return vio.data.DataLoader(dataset, batch_sampler=vio.data.BalancedBatchSampler(labels, 6, seed=4))

    first = loader()
    first.set_epoch(1)
    epoch = iter(first)
    seen = [next(epoch)["index"].tolist() for _ in range(2)]
    state = first.state_dict()
    rest = [batch["index"].tolist() for batch in epoch]
    again = loader()
    again.load_state_dict(state)
    assert [batch["index"].tolist() for batch in again] == rest
    whole = loader()
    whole.set_epoch(1)
    assert [batch["index"].tolist() for batch in whole] == seen + rest


def test_class_weights_are_inverse_to_each_class_share() -> None:
    weights = vio.data.class_weights([0, 0, 0, 1, 2, 2], 4)
    np.testing.assert_allclose(weights, [6 / 12, 6 / 4, 6 / 8, 0])


def test_a_split_by_tomogram_keeps_each_tomogram_whole_covers_every_row_and_is_the_seeds() -> None:
    rng = np.random.default_rng(0)
    tomograms = rng.choice([f"TS_{i:02d}" for i in range(10)], size=200)
    parts = vio.data.split_by_tomogram(tomograms, (0.8, 0.1, 0.1), seed=7)
    assert [len(set(tomograms[part])) for part in parts] == [8, 1, 1]
    assert sorted(np.concatenate(parts).tolist()) == list(range(200))
    held = [set(tomograms[part]) for part in parts]
    assert not (held[0] & held[1]) and not (held[0] & held[2]) and not (held[1] & held[2])
    again = vio.data.split_by_tomogram(tomograms, (0.8, 0.1, 0.1), seed=7)
    assert [part.tolist() for part in again] == [part.tolist() for part in parts]
    other = vio.data.split_by_tomogram(tomograms, (0.8, 0.1, 0.1), seed=8)
    assert [set(tomograms[p]) for p in other] != held
    with pytest.raises(ValueError, match="2 tomograms cannot be split into 3 parts"):
        vio.data.split_by_tomogram(["a", "b", "a"], (1, 1, 1), seed=0)


def test_picks_split_then_gain_background_in_their_own_tomograms(tmp_path: Path) -> None:
    files, extents = {}, {}
    for number, name in enumerate(EXTENTS):
        files[name] = str(tmp_path / f"{name}.mrc")
        extents[name] = EXTENTS[name]
        vio.write_single(np.full(EXTENTS[name], number, np.float32), files[name])
    picks_by_tomogram = random_picks(count=4)
    names = [name for name in EXTENTS for _ in range(4)]
    centres = np.concatenate([picks_by_tomogram[name] for name in EXTENTS])
    picks = vio.data.TomogramPicks(names, centres, BOX, np.arange(12) % 2, ["ribo", "other"], files, extents)
    train, validation = picks.split((2, 1), seed=0)
    assert set(train.tomograms.tolist()).isdisjoint(validation.tomograms.tolist())
    with_background = train.with_background(10, 3.0, seed=1, epoch=0)
    assert with_background.classes == ["ribo", "other", "background"]
    assert np.bincount(with_background.labels).tolist()[2] == 10
    added = with_background.centres[len(train) :]
    assert set(with_background.tomograms[len(train) :].tolist()) <= set(train.tomograms.tolist())
    for centre, name in zip(added, with_background.tomograms[len(train) :]):
        own = train.centres[train.tomograms == name]
        assert np.sqrt(((own - centre) ** 2).sum(axis=1)).min() >= 3.0
    batch = with_background.dataset()[:]
    values = {name: number for number, name in enumerate(EXTENTS)}
    expected = [values[name] for name in with_background.tomograms.tolist()]
    assert batch["image"][:, BOX[0] // 2, BOX[1] // 2, BOX[2] // 2].tolist() == expected


def test_picks_refuse_centres_not_a_row_of_three_and_subset_as_a_dataset_does() -> None:
    files, extents = {"a": "a.mrc"}, {"a": EXTENTS["a"]}
    with pytest.raises(ValueError, match=r"a \(z, y, x\) row for each pick, not an array of shape \(3, 2\)"):
        vio.data.TomogramPicks(["a"] * 2, np.ones((3, 2), int), BOX, [0, 0], ["x"], files, extents)
    picks = vio.data.TomogramPicks(
        ["a"] * 3, [[1, 2, 3], [4, 5, 6], [7, 8, 9]], BOX, [0, 1, 0], "xy", files, extents
    )
    assert picks.subset([True, False, True]).centres.tolist() == [[1, 2, 3], [7, 8, 9]]
    assert picks.subset([-1]).labels.tolist() == [0]
    with pytest.raises(IndexError):
        picks.subset([3])
