"""docker-compose.yml is the production shape, and every command it runs exists in the package."""

from __future__ import annotations

import yaml

from mycelium.cli.main import parse_args
from tests.support import REPO_ROOT


def compose() -> dict:
    return yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())


def test_compose_has_postgres_a_migration_and_two_replicas_on_separate_ports():
    services = compose()["services"]
    assert "pgvector" in services["postgres"]["image"]
    assert services["migrate"]["command"][:3] == ["mycelium", "db", "upgrade"]
    hubs = [name for name, svc in services.items() if svc.get("command", [None, None])[:2] == ["mycelium", "up"]]
    assert len(hubs) >= 2
    host_ports = [svc["ports"][0].split(":")[0] for name, svc in services.items() if name in hubs]
    assert len(set(host_ports)) == len(hubs)
    for name in hubs:
        env = services[name]["environment"]
        assert env["DATABASE_URL"] == services["migrate"]["environment"]["DATABASE_URL"]
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_every_command_in_compose_parses_with_the_cli():
    for name, svc in compose()["services"].items():
        command = svc.get("command")
        if not command or command[0] != "mycelium":
            continue
        args = parse_args(command[1:])
        assert callable(args.func), name
