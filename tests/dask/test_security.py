"""The local cluster on a shared machine: another user who finds its ports cannot run code as the user.

The tests run as root: another user is a process spawned afresh that takes uid 12345 before it
connects, as one who read the ports in `/proc/net/tcp` would.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import pickle
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import distributed
import psutil
import pytest
from distributed.security import Security

import vitrio.dask as vd
from vitrio.cli import main

OTHER = 12345


def attack(scheduler: str, nodes: list[str], target: str, outcomes: multiprocessing.Queue) -> None:
    """As uid 12345, make the cluster's processes create the folder `target`, over plain TCP and over TLS
    with keys of one's own: a client's task on the `scheduler`, a `run` on each of the workers and nannies
    `nodes`. Put what came of each try in `outcomes`."""
    os.setgroups([])
    os.setgid(OTHER)
    os.setuid(OTHER)
    for address in [scheduler, *nodes]:
        for scheme, security in (("tcp", Security()), ("tls", Security.temporary())):
            where = f"{scheme}://{address.partition('://')[2]}"
            try:
                if address == scheduler:
                    with distributed.Client(where, security=security, timeout="3s") as client:
                        client.submit(os.mkdir, target, pure=False).result(timeout=10)
                else:
                    asyncio.run(run_on(where, security, target))
                outcomes.put(f"ran on {where}")
            except Exception as error:  # noqa: BLE001 - every way of failing is a refusal
                outcomes.put(f"refused by {where}: {type(error).__name__}")


async def run_on(address: str, security: Security, target: str) -> None:
    """Have the worker or nanny at `address` run `os.mkdir(target)`, as a client's `run` does."""
    connection = security.get_connection_args("client")
    async with distributed.rpc(address, connection_args=connection, timeout=3) as node:
        call = node.run(function=pickle.dumps(functools.partial(os.mkdir, target)))
        await asyncio.wait_for(call, 10)


def test_another_user_who_finds_the_ports_runs_nothing(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    target = private / "planted"
    with vd.local_cluster(1, silence_logs=logging.CRITICAL) as cluster:
        workers = cluster.scheduler_info["workers"]
        nodes = [*workers, *(info["nanny"] for info in workers.values())]
        assert len(nodes) == 2
        spawn = multiprocessing.get_context("spawn")
        outcomes = spawn.Queue()
        other = spawn.Process(target=attack, args=(cluster.scheduler_address, nodes, str(target), outcomes))
        other.start()
        other.join(timeout=120)
        if other.is_alive():
            other.kill()
        tried = [outcomes.get(timeout=5) for _ in range(2 * (1 + len(nodes)))]
        assert other.exitcode == 0, tried
        with distributed.Client(cluster) as client:  # the user's own client still runs tasks
            assert client.submit(os.getuid, pure=False).result(timeout=30) == os.getuid()
    assert all(outcome.startswith("refused") for outcome in tried), tried
    assert not target.exists()
    assert cluster.scheduler_address.startswith("tls://127.0.0.1:")


def listening(processes: list[psutil.Process]) -> set[tuple[str, int]]:
    """The addresses the `processes` listen on for TCP connections."""
    return {
        (connection.laddr.ip, connection.laddr.port)
        for process in processes
        for connection in process.net_connections("tcp")
        if connection.status == psutil.CONN_LISTEN
    }


def status_of(url: str) -> int:
    """The HTTP status of a GET of `url`."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.parametrize("dashboard", [False, True])
def test_the_cluster_listens_on_127_0_0_1_alone_and_serves_pages_only_when_asked(dashboard: bool) -> None:
    before = listening([psutil.Process(), *psutil.Process().children(recursive=True)])
    with vd.local_cluster(1, dashboard, silence_logs=logging.CRITICAL) as cluster:
        opened = listening([psutil.Process(), *psutil.Process().children(recursive=True)]) - before
        workers = cluster.scheduler_info["workers"]
        speaking_tls = [cluster.scheduler_address, *workers, *(info["nanny"] for info in workers.values())]
        assert {ip for ip, _ in opened} == {"127.0.0.1"}
        web = {port for _, port in opened} - {int(address.rpartition(":")[2]) for address in speaking_tls}
        assert web  # the scheduler's and the worker's HTTP servers
        pages = ["status", "health", "metrics", "info/main/workers.html"]
        served = {status_of(f"http://127.0.0.1:{port}/{page}") for port in web for page in pages}
        if dashboard:
            assert cluster.dashboard_link.startswith("http://127.0.0.1:")
            assert status_of(cluster.dashboard_link) == 200 and 200 in served
        else:
            assert served == {404}


class Unreached(OSError):
    """What the stand-in of `distributed.Client` raises, as one that cannot reach its scheduler."""


@pytest.fixture
def unreached(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(address: str) -> None:
        raise Unreached(address)

    monkeypatch.setattr(distributed, "Client", refuse)


@pytest.mark.parametrize(
    ("address", "warned"),
    [
        ("tcp://10.0.0.5:8786", True),
        ("head:8786", True),
        ("ws://head.cluster.org:8786", True),
        ("tls://head:8786", False),
        ("tcp://127.0.0.1:8786", False),
        ("tcp://localhost:8786", False),
        ("tcp://[::1]:8786", False),
    ],
)
def test_a_scheduler_reached_without_encryption_from_afar_is_warned_of_first(unreached, address, warned):
    with warnings.catch_warnings(record=True) as caught, pytest.raises(Unreached):
        warnings.simplefilter("always")
        with vd.client_for(address):
            pass
    messages = [str(warning.message) for warning in caught]
    if warned:
        assert len(messages) == 1, messages
        assert messages[0].startswith(f"{address}: the scheduler is reached without encryption")
        assert messages[0].endswith("use tls:// with your certificates")
    else:
        assert messages == []


def test_the_command_warns_on_stderr_before_sending_work(unreached, tmp_path: Path, capsys) -> None:
    (tmp_path / "in.mrc").write_bytes(b"")
    command = ["convert", tmp_path / "in.mrc", tmp_path / "out.tif", "--scheduler", "tcp://head:8786"]
    assert main([str(part) for part in command]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vitrio: warning: tcp://head:8786: the scheduler is reached without encryption")


def test_a_dashboard_goes_with_a_local_cluster(capsys) -> None:
    assert main(["convert", "in.mrc", "out.tif", "--scheduler", "tls://head:8786", "--dashboard"]) == 1
    assert "--dashboard goes with --local" in capsys.readouterr().err
