"""Every published name is exported; executors, loaders, savers and selectors assemble as published."""

from __future__ import annotations

import numpy as np
import pytest

import vitrio as vio

PUBLISHED_ADDITIONS = [
    "Array",
    "Executor",
    "ExecutorImageLoader",
    "ExecutorImageSaver",
    "ImageWriterProvider",
    "ImageFileReadFormatSelector",
    "ImageFileWriteFormatSelector",
    "DetectorEventTimelineDescriptor",
    "DetectorEventTimelineReader",
    "DetectorEventTimelineReaderProvider",
    "FileDetectorEventTimelineReaderProvider",
    "DetectorEventTimelineFileReadFormatSelector",
    "detector_event_timeline_reader_provider",
    "DetectorEventFractionation",
    "DetectorEventBinning",
    "DetectorEventRenderer",
    "CountingDetectorEventRenderer",
    "DetectorEventImageReaderProvider",
]


@pytest.mark.parametrize("name", PUBLISHED_ADDITIONS)
def test_published_name_is_exported_and_documented(name):
    assert name in vio.__all__
    value = getattr(vio, name)
    assert value.__doc__ and len(value.__doc__.strip()) > 20


@pytest.mark.parametrize(
    "abstract",
    [
        vio.Executor,
        vio.ImageWriterProvider,
        vio.DetectorEventTimelineReader,
        vio.DetectorEventTimelineReaderProvider,
        vio.DetectorEventRenderer,
        vio.Array,
        vio.ImageFileReadFormatSelector,
        vio.ImageFileWriteFormatSelector,
        vio.DetectorEventTimelineFileReadFormatSelector,
    ],
)
def test_abstract_classes_and_classes_without_constructor_refuse_a_call(abstract):
    with pytest.raises(TypeError):
        abstract()


def test_executors_are_executors():
    assert isinstance(vio.ThreadPoolExecutor(2), vio.Executor)
    assert isinstance(vio.SynchronousExecutor(), vio.Executor)
    assert not isinstance(object(), vio.Executor)


def test_loader_and_saver_are_the_executor_kinds():
    loader = vio.loader(workers=1)
    assert isinstance(loader, vio.ExecutorImageLoader) and isinstance(loader, vio.ImageLoader)
    writers = vio.writer_provider()
    assert isinstance(writers, vio.FileImageWriterProvider) and isinstance(writers, vio.ImageWriterProvider)
    saver = vio.saver(writers, workers=1)
    assert isinstance(saver, vio.ExecutorImageSaver) and isinstance(saver, vio.ImageSaver)


def test_loader_and_saver_built_by_hand_read_and_write_batches(tmp_path, rng):
    images = rng.normal(size=(3, 4, 6)).astype(np.float32)
    executor = vio.ThreadPoolExecutor(2)
    writers = vio.FileImageWriterProvider(vio.ImageFileWriteFormatSelector.get_shared())
    saver = vio.ExecutorImageSaver(writers, executor)
    path = tmp_path / "stack.mrcs"
    writers.declare(path, vio.ImageDescriptor((3, 4, 6), 2, vio.NumericalType.float32))
    vio.write_batch_async(saver, images, [vio.ImageLocation(path, i) for i in range(3)]).get()
    writers.close(path)
    readers = vio.FileImageReaderProvider(vio.ImageFileReadFormatSelector.get_shared())
    loader = vio.ExecutorImageLoader(readers, executor)  # one executor serves both
    out = np.zeros((3, 4, 6), np.float32)
    vio.read_batch_async(loader, out, [vio.ImageLocation(path, i) for i in (2, 0, 1)]).get()
    np.testing.assert_array_equal(out, images[[2, 0, 1]])


@pytest.mark.parametrize("kind", [vio.ExecutorImageLoader, vio.ExecutorImageSaver])
def test_hand_built_loaders_refuse_wrong_arguments(kind):
    provider = vio.reader_provider() if kind is vio.ExecutorImageLoader else vio.writer_provider()
    executor = vio.SynchronousExecutor()
    for arguments in [(), (provider,), (None, executor), (provider, None), (executor, provider)]:
        with pytest.raises(TypeError):
            kind(*arguments)


def test_writer_provider_serving_no_such_key_fails_with_index_error(tmp_path):
    saver = vio.saver(vio.writer_provider(), workers=1)
    completion = vio.write_batch_async(saver, np.zeros((1, 2, 2)), [vio.ImageLocation(tmp_path / "x.mrc", 0)])
    with pytest.raises(IndexError):
        completion.get()


@pytest.mark.parametrize(
    "selector",
    [
        vio.ImageFileReadFormatSelector,
        vio.ImageFileWriteFormatSelector,
        vio.DetectorEventTimelineFileReadFormatSelector,
    ],
)
def test_get_shared_is_one_instance(selector):
    shared = selector.get_shared()
    assert isinstance(shared, selector) and shared is selector.get_shared()


def test_shared_selectors_hold_the_bundled_formats():
    names = lambda selector: {f.name for f in selector.get_shared()}  # noqa: E731
    assert {"mrc", "tiff", "dm"} <= names(vio.ImageFileReadFormatSelector) and "eer" not in names(
        vio.ImageFileReadFormatSelector
    )
    assert names(vio.ImageFileWriteFormatSelector) >= {"mrc", "tiff"}
    assert "dm" not in names(vio.ImageFileWriteFormatSelector)
    assert names(vio.DetectorEventTimelineFileReadFormatSelector) == {"eer"}


def test_every_formats_argument_takes_the_selectors(tmp_path, rng):
    data = rng.normal(size=(4, 6)).astype(np.float32)
    writes = vio.ImageFileWriteFormatSelector.get_shared()
    reads = vio.ImageFileReadFormatSelector.get_shared()
    vio.write_single(data, tmp_path / "a.tif", formats=writes)
    vio.writer_provider(writes)
    vio.FileImageWriterProvider(writes)
    for readers in (vio.reader_provider(formats=reads), vio.FileImageReaderProvider(reads)):
        np.testing.assert_array_equal(vio.read(tmp_path / "a.tif", readers=readers), data)
    out = np.zeros((1, 4, 6), np.float32)
    vio.read_batch_async(vio.loader(workers=1, formats=reads), out, [tmp_path / "a.tif"]).get()
    np.testing.assert_array_equal(out[0], data)
