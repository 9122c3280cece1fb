"""Drawn files served at URLs for an example, and the sizes of the requests that fetch them."""

from __future__ import annotations

from hypothesis import strategies as st

from vitrio._config import configuration, configure

from ..remote.conftest import BUCKET
from .files import Drawn


def request_sizes(data, size: int):
    """`remote_part` and `remote_gap` configured for an example: the file of `size` bytes cut into up to 16
    parts (or left whole, as parts of 16 MiB leave it), merged across gaps of a few bytes, or of one (what
    touches)."""
    parts = data.draw(st.sampled_from([1, 2, 3, 7, 16]), label="parts")
    part = max(16, -(-size // parts)) + data.draw(st.integers(0, 5), label="part's odd bytes")
    gap = data.draw(st.sampled_from([1, 7, part // 2, configuration().remote_gap]), label="gap")
    return configure(remote_part=part, remote_gap=gap)


def served(drawn: Drawn, place: str, s3, http) -> tuple[str, dict]:
    """The key of `drawn` (a file, or a store's folder) served from `place` ("local", "s3", "http"), and
    the options that reach it."""
    name, path = drawn.path.name, drawn.path
    if place == "local":
        return str(path), {}
    if place == "s3":
        return (s3.put_store(str(path), BUCKET, name) if path.is_dir() else s3.put(path, name)), s3.options
    for file in [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]:
        http.files[f"{name}/{file.relative_to(path).as_posix()}" if path.is_dir() else name] = (
            file.read_bytes()
        )
    return f"{http.url}/{name}", {}


def largest_file(drawn: Drawn) -> int:
    """The size of `drawn`'s file, or of the largest file of a store."""
    files = [p for p in drawn.path.rglob("*") if p.is_file()] if drawn.path.is_dir() else [drawn.path]
    return max(p.stat().st_size for p in files)
