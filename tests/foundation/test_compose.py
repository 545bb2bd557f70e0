"""docker-compose.yml is the production shape, and every command it runs exists in the package."""

from __future__ import annotations

import yaml

from mycelium.cli.main import parse_args
from tests.support import REPO_ROOT


def compose() -> dict:
    return yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())


def test_compose_has_postgres_a_migration_two_http_replicas_on_separate_ports_and_a_worker():
    services = compose()["services"]
    assert "pgvector" in services["postgres"]["image"]
    assert services["migrate"]["command"][:3] == ["mycelium", "db", "upgrade"]
    hubs = [name for name, svc in services.items() if svc.get("command", [None, None])[:2] == ["mycelium", "up"]]
    assert len(hubs) >= 2
    host_ports = [svc["ports"][0].split(":")[0] for name, svc in services.items() if name in hubs]
    assert len(set(host_ports)) == len(hubs)
    # the replicas serve HTTP only; the background loops run in their own service
    assert all("--no-workers" in services[name]["command"] for name in hubs)
    workers = [name for name, svc in services.items() if svc.get("command", [None, None])[:2] == ["mycelium", "worker"]]
    assert len(workers) >= 1
    assert all("ports" not in services[name] for name in workers)
    for name in hubs + workers:
        env = services[name]["environment"]
        assert env["DATABASE_URL"] == services["migrate"]["environment"]["DATABASE_URL"]
        assert env["MYCELIUM_MIGRATE_ON_START"] == "false"
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    # the worker holds the mirror and the receipt keys in the same data volume as the replicas
    assert {services[name]["environment"]["MYCELIUM_DATA_DIR"] for name in hubs + workers} == {"/data"}


def test_every_command_in_compose_parses_with_the_cli():
    for name, svc in compose()["services"].items():
        command = svc.get("command")
        if not command or command[0] != "mycelium":
            continue
        args = parse_args(command[1:])
        assert callable(args.func), name
