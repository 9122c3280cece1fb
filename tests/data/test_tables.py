"""as_columns, make_locations and parse_locations."""

from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import vitrio as vio
from vitrio import ImageLocation
from vitrio.data import as_columns, make_locations, parse_locations


def test_as_columns_of_a_dataframe_a_mapping_and_a_structured_array():
    frame = pd.DataFrame({"b": [1.5, 2.5], "a": ["x", "y"]})
    columns = as_columns(frame)
    assert list(columns) == ["b", "a"]
    assert isinstance(columns["b"], np.ndarray) and columns["b"].tolist() == [1.5, 2.5]
    mapping = as_columns({"u": [1, 2, 3], "v": np.zeros((3, 2))})
    assert list(mapping) == ["u", "v"] and mapping["v"].shape == (3, 2)
    structured = np.zeros(4, dtype=[("blob/idx", "<u4"), ("blob/path", "S20"), ("ctf", "<f4", (2,))])
    structured["blob/idx"] = [3, 2, 1, 0]
    columns = as_columns(structured)
    assert list(columns) == ["blob/idx", "blob/path", "ctf"]
    assert columns["blob/idx"].tolist() == [3, 2, 1, 0] and columns["ctf"].shape == (4, 2)
    assert np.shares_memory(columns["blob/idx"], structured)


def test_as_columns_errors():
    with pytest.raises(TypeError, match="a table is a pandas DataFrame, .* not list"):
        as_columns([1, 2, 3])
    with pytest.raises(TypeError, match="a table is a pandas DataFrame, .* not ndarray"):
        as_columns(np.zeros(3))
    with pytest.raises(ValueError, match="not all as long"):
        as_columns({"a": [1, 2], "b": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"columns \['a'\] hold a single value, not a value for each row"):
        as_columns({"a": 3})


def test_make_locations_as_cryosparc_states_them(tmp_path):
    keys = np.array([b">J1/extract/a.mrc", b"/abs/b.mrc", b"J1/extract/a.mrc"], dtype="S40")
    locations = make_locations(keys, np.array([0, 5, 2], dtype=np.uint32), root=tmp_path)
    assert locations == [
        ImageLocation(tmp_path / "J1/extract/a.mrc", 0),
        ImageLocation("/abs/b.mrc", 5),
        ImageLocation(tmp_path / "J1/extract/a.mrc", 2),
    ]
    assert make_locations(["x.mrc", Path("y.mrc")]) == [ImageLocation("x.mrc"), ImageLocation("y.mrc")]
    assert make_locations([">p/z.mrcs"], [1]) == [ImageLocation("p/z.mrcs", 1)]
    with pytest.raises(ValueError, match="2 indices for 3 keys"):
        make_locations(["a", "b", "c"], [0, 1])
    with pytest.raises(ValueError, match="an index in a stack cannot be negative: -1"):
        make_locations(["a"], [-1])


def test_parse_locations_as_relion_writes_them(tmp_path):
    texts = ["000003@Extract/job5/a.mrcs", b"1@/abs/b.mrcs", "Micrographs/m.mrc"]
    assert parse_locations(texts) == [
        ImageLocation("Extract/job5/a.mrcs", 2),
        ImageLocation("/abs/b.mrcs", 0),
        ImageLocation("Micrographs/m.mrc"),
    ]
    assert parse_locations(pd.Series(texts), root=tmp_path) == [
        ImageLocation(tmp_path / "Extract/job5/a.mrcs", 2),
        ImageLocation("/abs/b.mrcs", 0),
        ImageLocation(tmp_path / "Micrographs/m.mrc"),
    ]
    for bad in ["0@a.mrcs", "", "x@a.mrcs", 3.5]:
        with pytest.raises(ValueError, match=f"not an image location: {re.escape(repr(bad))}"):
            parse_locations(["1@fine.mrcs", bad])


class _Counting(http.server.BaseHTTPRequestHandler):
    """Counts the requests it is sent, and answers each with a 404."""

    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self.requests.append(self.path)
        self.send_error(404)

    do_HEAD = do_GET  # noqa: N815

    def log_message(self, *arguments) -> None:
        """Nothing: the tests' output stays clean."""


@pytest.fixture
def beacon():
    """The address of a server on 127.0.0.1 that counts the requests it is sent, and their list."""
    handler = type("Handler", (_Counting,), {"requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler.requests
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_url_written_in_metadata_is_a_local_path_and_no_request_is_sent(beacon, tmp_path, monkeypatch):
    address, requests = beacon
    monkeypatch.chdir(tmp_path)
    written = f"1@{address}/x.zarr"
    [parsed] = parse_locations([written])
    [made] = make_locations([f"{address}/x.zarr"], [0])
    for location in (parsed, made):
        assert location.key == f"./{address}/x.zarr" and location.index_in_stack == 0
        with pytest.raises(FileNotFoundError, match=re.escape(location.key)):
            vio.query_descriptor(location.key)
    assert parse_locations([written], root=tmp_path)[0].key == f"{tmp_path}/{address}/x.zarr"
    assert requests == []
    [remote] = parse_locations([written], allow_remote=True)
    assert remote.key == f"{address}/x.zarr"
    with pytest.raises((FileNotFoundError, vio.FormatError)):
        vio.query_descriptor(remote.key)
    assert requests  # the caller asked for it: now the server is asked
