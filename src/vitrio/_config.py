"""Every pool, size and time limit vitrio chooses, named once.

`configuration()` is the value in force: the defaults below, each overridden
by the environment variable `VITRIO_<FIELD>` (`VITRIO_REMOTE_TIMEOUT=5`), read
once, at the first call. `configure(**changes)` changes it for the process
(or, in a `with` block, until the block ends). A loader or a storage given a
`Configuration` of its own uses that one instead.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["Configuration", "configuration", "configure"]


@dataclasses.dataclass(frozen=True)
class Configuration:
    """What vitrio chooses where a caller does not say. Every field has a default and an environment
    variable, `VITRIO_` and the field's name in capitals.

    Attributes:
        remote_gap: Byte ranges of a file at a URL closer than this many bytes are fetched as one.
        remote_part: The most bytes one request for a file at a URL asks for.
        remote_in_flight: The most requests for ranges of files at URLs in flight at once.
        remote_connections: The connections an `s3://` filesystem keeps open at most.
        remote_attempts: How many times a request that fails for a passing reason is made in all.
        remote_backoff: The seconds waited before a request is made again; doubled at each attempt.
        remote_timeout: The seconds a request may wait for each piece of its answer.
        remote_connect_timeout: The seconds a request may take to connect.
    """

    remote_gap: int = 1 << 20
    remote_part: int = 16 << 20
    remote_in_flight: int = 32
    remote_connections: int = 64
    remote_attempts: int = 4
    remote_backoff: float = 0.05
    remote_timeout: float = 20.0
    remote_connect_timeout: float = 5.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            kind = _kind(field)
            if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
                noun = "an integer" if kind is int else "a number"
                raise TypeError(f"configuration {field.name} is {noun}, not {value!r}")
            if not value > 0:
                raise ValueError(f"configuration {field.name} is positive, not {value!r}")

    def replace(self, **changes: Any) -> Configuration:
        """This configuration with `changes`, checked.

        Raises:
            TypeError: If a change names no field, or gives a value of the wrong type.
            ValueError: If a value is not positive.
        """
        unknown = sorted(set(changes) - {field.name for field in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"no configuration is named {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)


def _kind(field: dataclasses.Field) -> type:
    return int if field.type in ("int", int) else float


def _from_environment(environment: Mapping[str, str]) -> Configuration:
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(Configuration):
        name = f"VITRIO_{field.name.upper()}"
        if name in environment:
            text = environment[name]
            try:
                changes[field.name] = _kind(field)(text)
            except ValueError:
                raise ValueError(f"environment variable {name} is a number, not {text!r}") from None
    try:
        return Configuration(**changes)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the environment's VITRIO_ variables: {error}") from None


_lock = threading.Lock()
_current: Configuration | None = None


def configuration() -> Configuration:
    """The configuration in force for the process."""
    global _current
    with _lock:
        if _current is None:
            _current = _from_environment(os.environ)
        return _current


class _Configured:
    """What `configure` returns: a `with` block over it restores the configuration before it."""

    def __init__(self, before: Configuration):
        self._before = before

    def __enter__(self) -> Configuration:
        return configuration()

    def __exit__(self, *exc: Any) -> None:
        global _current
        with _lock:
            _current = self._before


def configure(**changes: Any) -> _Configured:
    """Change the configuration in force for the process; in a `with` block, until the block ends.

    Raises:
        TypeError: If a change names no field, or gives a value of the wrong type.
        ValueError: If a value is not positive.
    """
    global _current
    before = configuration()
    changed = before.replace(**changes)
    with _lock:
        _current = changed
    return _Configured(before)
