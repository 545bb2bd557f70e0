"""Where the project's non-Python parts live: the SQL, the migrations and the contracts.

They sit at the top of the repository (``sql/``, ``migrations/``, ``contracts/``) and the wheel
carries them inside the package (``mycelium/_sql``, ``mycelium/_migrations``, ``mycelium/_contracts``;
see ``pyproject.toml``). An installed hub finds them in the package; a source checkout installed with
``pip install -e .`` finds them beside ``service/``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@cache
def _resource(folder: str) -> Path:
    installed = _PACKAGE / f"_{folder}"
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parents[1] / folder
    if checkout.is_dir():
        return checkout
    raise RuntimeError(
        f"the hub's {folder}/ folder is missing: looked in {installed} and {checkout}; "
        "reinstall the package (pip install mycelium-hub)"
    )


def sql_dir() -> Path:
    return _resource("sql")


def migrations_dir() -> Path:
    return _resource("migrations")


def contracts_dir() -> Path:
    return _resource("contracts")
