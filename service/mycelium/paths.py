"""Where the project's non-Python parts live (the SQL, the migrations, the contracts).

The hub runs from a source checkout (``pip install -e .``), so these are folders beside ``service/``.
``MYCELIUM_PROJECT_ROOT`` points elsewhere when the package is installed on its own.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    override = os.environ.get("MYCELIUM_PROJECT_ROOT")
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parents[2]


def sql_dir() -> Path:
    return project_root() / "sql"


def migrations_dir() -> Path:
    return project_root() / "migrations"


def contracts_dir() -> Path:
    return project_root() / "contracts"
