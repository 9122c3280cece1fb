"""The read path asks, never tells apart by type or spelling: no code above the formats tests a reader's
or a byte source's class, and no module but `vitrio._storage` (and the remote files it opens) tests a key's
scheme."""

from __future__ import annotations

import re
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[2] / "src"

_CLASS_TEST = re.compile(r"isinstance\([^)]*\b(RawArrayReader|RemoteRawReader|RemoteFile|LocalFile)\b")
_SCHEME_TEST = re.compile(
    r"""["']://["']\s+(not\s+)?in\b|\.startswith\(\(?["'](s3|gs|https?|file)://|re\.compile\(r?["'][^"']*[*+]\)?://"""
)

SCHEMES = ("vitrio/_storage.py", "vitrio/_remote/")
"""Where a key's scheme is read: the storage, and the files at URLs it opens."""
STILL_SCHEMES: dict[str, str] = {}
"""Modules that still test a key's scheme, each with what does: to ask the storage instead."""


def _modules():
    for path in sorted(SOURCES.rglob("*.py")):
        yield path.relative_to(SOURCES).as_posix(), path.read_text("utf8")


def test_no_code_above_the_formats_tests_a_readers_class():
    found = [
        f"{name}:{number}: {line.strip()}"
        for name, text in _modules()
        if not name.startswith(("vitrio/formats/", *SCHEMES))
        for number, line in enumerate(text.splitlines(), 1)
        if _CLASS_TEST.search(line)
    ]
    assert not found, "ask what the reader can do (layout, will_read, ...):\n" + "\n".join(found)


def test_only_the_storage_tests_a_keys_scheme():
    found = [
        f"{name}:{number}: {line.strip()}"
        for name, text in _modules()
        if not name.startswith(SCHEMES) and name not in STILL_SCHEMES
        for number, line in enumerate(text.splitlines(), 1)
        if _SCHEME_TEST.search(line)
    ]
    assert not found, "ask the storage (storage.is_remote, or vitrio._storage.is_url):\n" + "\n".join(found)
    for name in STILL_SCHEMES:
        assert _SCHEME_TEST.search((SOURCES / name).read_text("utf8")), f"{name} needs no exception now"
