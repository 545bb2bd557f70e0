"""The distribution names every package under service/ and carries the SQL, migrations and
contracts inside the package, where mycelium.paths finds them."""

from __future__ import annotations

import tomllib

from setuptools import find_packages

from mycelium import paths
from tests.support import REPO_ROOT


def config() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_package_list_names_every_package_under_service():
    listed = set(config()["packages"])
    assert set(find_packages(str(REPO_ROOT / "service"))) == {p for p in listed if not p.startswith("mycelium._")}


def test_the_top_level_folders_map_into_the_package():
    mapped = config()["package-dir"]
    assert {k: v for k, v in mapped.items() if k} == {
        "mycelium._sql": "sql", "mycelium._migrations": "migrations", "mycelium._contracts": "contracts"}
    # from a checkout the same folders are found beside service/
    assert paths.sql_dir() == REPO_ROOT / "sql"
    assert paths.migrations_dir() == REPO_ROOT / "migrations"
    assert paths.contracts_dir() == REPO_ROOT / "contracts"
