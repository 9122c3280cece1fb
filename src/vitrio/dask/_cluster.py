"""Reaching a cluster: `local_cluster`, kept to this machine and its user; `client_for`, a client of one."""

from __future__ import annotations

import contextlib
import ipaddress
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import distributed

WORKER_CONFIG = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
"""Dask settings for the workers that run vitrio's tasks: glibc's own allocation of large buffers.

distributed starts its workers with MALLOC_TRIM_THRESHOLD_=65536, which
keeps glibc from reusing the memory of a batch freed for the next one: each
batch of a task is then mapped afresh and faulted in page by page, which
made a task of extraction three to five times slower. Give these to
`dask.config.set` where the workers are started (`local_cluster` does), or write them into
the Dask configuration files the workers of other machines read.
"""


def local_cluster(workers: int, dashboard: bool = False, **options: Any) -> distributed.LocalCluster:
    """A `LocalCluster` of `workers` processes of one thread each, on 127.0.0.1, set up by `WORKER_CONFIG`.

    Its scheduler, workers and nannies speak TLS and accept only peers that
    hold the key made for this cluster alone, kept in this process's memory
    (distributed's `Security.temporary()`): another user of the machine who
    finds their ports can neither connect nor run anything as you. Its
    processes serve no web pages (dashboard, metrics, logs) unless
    `dashboard` asks for them, and then on 127.0.0.1 only, where every user
    of the machine may read them.

    Args:
        workers: How many worker processes.
        dashboard: Whether to serve the dashboard, on a free port of 127.0.0.1.
        options: More arguments of `LocalCluster` (`silence_logs=logging.ERROR`, say).

    Raises:
        ValueError: If `workers` is not positive.
    """
    import dask
    from distributed import LocalCluster

    if workers < 1:
        raise ValueError(f"a local cluster has one worker or more, not {workers}")
    settings = {"n_workers": workers, "threads_per_worker": 1, "processes": True, "host": "127.0.0.1"}
    settings |= {
        "security": True,
        "dashboard_address": "127.0.0.1:0",
        "scheduler_kwargs": {"dashboard": dashboard},
    }
    unserved = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
    with dask.config.set(WORKER_CONFIG | ({} if dashboard else unserved)):
        return LocalCluster(**(settings | options))


def _unencrypted_and_remote(address: str) -> bool:
    """Whether the scheduler `address` is reached without encryption from another machine (`tcp://head:8786`).

    Anyone who reaches such a scheduler runs code on its workers, and sees
    the tasks and their results.
    """
    scheme, _, rest = address.rpartition("://")
    if (scheme or "tcp").lower() not in ("tcp", "ws"):
        return False
    host = urlsplit(f"//{rest}").hostname or ""
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: only localhost is taken as this machine
        return host.lower() != "localhost"


@contextlib.contextmanager
def client_for(
    scheduler: str | None = None, local: int | None = None, dashboard: bool = False
) -> Iterator[distributed.Client]:
    """A `distributed.Client` of the scheduler at `scheduler`, or of a new `local_cluster` of `local` workers.

    The local cluster is shut down at the end of the block. A scheduler is
    reached as the Dask configuration says: for `tls://` with the keys and
    certificates of `distributed.comm.tls`. One reached without encryption
    from another machine is warned of first.

    Args:
        scheduler: The address of a running scheduler.
        local: How many worker processes the local cluster has.
        dashboard: Whether the local cluster serves its dashboard (`local_cluster`).

    Raises:
        ValueError: If neither or both are given, or `local` is not positive.
        OSError: If the scheduler cannot be reached.
    """
    from distributed import Client

    if (scheduler is None) == (local is None):
        raise ValueError("give the address of a scheduler or a number of local workers, one of them")
    if scheduler is not None:
        if _unencrypted_and_remote(scheduler):
            warnings.warn(
                f"{scheduler}: the scheduler is reached without encryption or authentication: whoever can "
                "reach it runs code on its workers and sees the tasks; use tls:// with your certificates",
                stacklevel=3,
            )
        with Client(scheduler) as client:
            yield client
        return
    with local_cluster(local, dashboard) as cluster, Client(cluster) as client:
        yield client
