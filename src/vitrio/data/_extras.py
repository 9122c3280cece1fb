"""The error of a feature whose optional dependency is not installed, naming the extra that installs it."""

from __future__ import annotations

__all__ = ["EXTRAS", "missing"]

EXTRAS = {
    "torch": "torch",
    "jax": "jax",
    "pandas": "star",
    "starfile": "star",
    "ml_dtypes": "torch",
    "copick": "copick",
}
"""The extra of vitrio that installs each optional module of vitrio.data."""


def missing(error: ModuleNotFoundError, needed_by: str) -> ModuleNotFoundError:
    """The error to raise for `error`, met by `needed_by` (a function, an argument): where the module
    is one an extra installs, an error saying which; any other is returned as it is (a broken install)."""
    extra = EXTRAS.get(error.name or "")
    if extra is None:
        return error
    return ModuleNotFoundError(
        f"{needed_by} needs {error.name}: pip install 'vitrio[{extra}]'", name=error.name
    )
