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
import ssl
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path

import distributed
import psutil
import pytest
from distributed.comm.core import CommClosedError
from distributed.security import Security

import vitrio.dask as vd
from vitrio.cli import main

OTHER = 12345
OWN_CLIENT_LIMIT = 300
"""How long the user's own client may take to connect and run a task: only a machine far past loaded
takes that long; what another user's tries may wait is derived from what it did take."""


class OwnKeys(Security):
    """TLS with a key and certificate of one's own, checking nothing of the server's: what another user
    can make, so that only the cluster's check of the client can refuse it."""

    def get_connection_args(self, role: str) -> dict:
        arguments = super().get_connection_args(role)
        arguments["ssl_context"].check_hostname = False
        arguments["ssl_context"].verify_mode = ssl.CERT_NONE
        return arguments


def causes(error: BaseException | None) -> list[BaseException]:
    """`error` and those it was raised from, outermost first."""
    found = []
    while error is not None and error not in found:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def outcome_of(error: BaseException) -> str:
    """'refused: ...' where a peer refused the connection (reset it, closed it, sent a TLS alert) and
    nothing ran out of time; else 'failed otherwise: ...', which proves nothing."""
    chain = causes(error)
    told = " <- ".join(repr(cause) for cause in chain)
    if any(isinstance(cause, (asyncio.TimeoutError, TimeoutError)) for cause in chain):
        return f"failed otherwise: {told}"
    if any(isinstance(cause, (ssl.SSLError, ConnectionResetError, CommClosedError)) for cause in chain):
        return f"refused: {told}"
    return f"failed otherwise: {told}"


def attack(
    scheduler: str, nodes: list[str], keys: Security, targets: tuple[str, str], patience: float, outcomes
) -> None:
    """As uid 12345, try to make the cluster's processes create a folder: a client's task on the `scheduler`,
    a `run` on each of the workers and nannies `nodes`, over plain TCP and over TLS with keys of one's own;
    then, as a control, over TLS with the cluster's own `keys`. The tries create `targets[0]`, the
    control `targets[1]`; each waits up to `patience` seconds. Send what came of each to `outcomes`."""
    os.setgroups([])
    os.setgid(OTHER)
    os.setuid(OTHER)
    target, control = targets
    tries = [("tcp", Security(), target), ("tls", OwnKeys.temporary(), target), ("tls", keys, control)]
    with outcomes:
        for address in [scheduler, *nodes]:
            for scheme, security, folder in tries:
                where = f"{scheme}://{address.partition('://')[2]}"
                mkdir = functools.partial(os.makedirs, folder, exist_ok=True)
                try:
                    if address == scheduler:
                        with distributed.Client(where, security=security, timeout=patience) as client:
                            client.submit(mkdir, pure=False).result(timeout=patience)
                    else:
                        asyncio.run(run_on(where, security, mkdir, patience))
                    outcome = "ran"
                except Exception as error:  # noqa: BLE001 - told apart by outcome_of
                    outcome = outcome_of(error)
                outcomes.send((where, folder == control, outcome))


async def run_on(address: str, security: Security, function: Callable[[], None], patience: float) -> None:
    """Have the worker or nanny at `address` run `function`, as a client's `run` does."""
    connection = security.get_connection_args("client")
    async with distributed.rpc(address, connection_args=connection, timeout=patience) as node:
        await asyncio.wait_for(node.run(function=pickle.dumps(function)), patience)


def test_another_user_who_finds_the_ports_runs_nothing(tmp_path: Path) -> None:
    """However loaded the machine: each try waits far longer than the user's own client took, the
    control (the same tries with the cluster's keys) shows they run when let in, and a try that ran
    out of time counts as nothing refused."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    target, control = private / "planted", private / "control"
    with vd.local_cluster(1, silence_logs=logging.CRITICAL) as cluster:
        started = time.monotonic()
        with distributed.Client(cluster, timeout=OWN_CLIENT_LIMIT) as client:
            client.wait_for_workers(1, timeout=OWN_CLIENT_LIMIT)
            assert client.submit(os.getuid, pure=False).result(timeout=OWN_CLIENT_LIMIT) == os.getuid()
            workers = client.scheduler_info()["workers"]
        patience = 60 + 20 * (time.monotonic() - started)
        nodes = [*workers, *(info["nanny"] for info in workers.values())]
        assert len(nodes) == 2
        spawn = multiprocessing.get_context("spawn")
        receiving, sending = spawn.Pipe(duplex=False)
        targets = (str(target), str(control))
        other = spawn.Process(
            target=attack,
            args=(cluster.scheduler_address, nodes, cluster.security, targets, patience, sending),
        )
        other.start()
        sending.close()  # the child's end alone is left: reading ends when the child does
        tried = []
        with receiving:
            while True:
                try:
                    tried.append(receiving.recv())
                except EOFError:
                    break
        other.join()
        with distributed.Client(cluster, timeout=OWN_CLIENT_LIMIT) as client:  # the user's own still runs
            assert client.submit(os.getuid, pure=False).result(timeout=OWN_CLIENT_LIMIT) == os.getuid()
    assert other.exitcode == 0 and len(tried) == 3 * (1 + len(nodes)), tried
    assert all(outcome.startswith("refused") for _, is_control, outcome in tried if not is_control), tried
    assert not target.exists()
    assert [outcome for _, is_control, outcome in tried if is_control] == ["ran"] * (1 + len(nodes)), tried
    assert control.is_dir()  # the same tries, with the cluster's keys, would have run
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
