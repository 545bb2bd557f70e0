"""``mycelium join <code>``: redeem a join code and keep the membership for this folder in
``.mycelium/member.json`` (mode 0600, git-ignored), found from any folder below; later commands act
as its handle and send its token (``MYCELIUM_HANDLE`` and ``MYCELIUM_TOKEN`` still win)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from mycelium import environment
from mycelium.cli.client import api_url, call, print_json


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("join", help="redeem a join code; this folder acts as the member from then on")
    p.add_argument("code", help="the code, as given (xxxx-xxxx-xxxx; case and separators do not matter)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    answer = call("POST", "/api/joins/redeem", json_body={"code": args.code})
    existing = environment.membership_file()
    folder = existing.parent if existing else Path.cwd() / environment.DATA_DIR_NAME
    folder.mkdir(parents=True, exist_ok=True)
    saved = {"hub": api_url(), "room": answer["room"], "handle": answer["handle"],
             "token": answer.get("token"), "token_expires_at": answer.get("token_expires_at")}
    path = folder / environment.MEMBER_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(saved, out, indent=2)
    os.chmod(path, 0o600)
    ignore = folder / ".gitignore"
    lines = ignore.read_text().splitlines() if ignore.exists() else []
    if environment.MEMBER_FILE not in lines:
        ignore.write_text("\n".join([*lines, environment.MEMBER_FILE]) + "\n")
    if args.json:
        print_json({**saved, "token": bool(saved["token"]), "saved_to": str(path)})
        return 0
    print(f"joined {answer['room']} as @{answer['handle']}"
          + ("" if saved["token"] else " (no token: the hub is not gated)") + f"; saved in {path}")
    return 0
