"""``mycelium file``: a room's files. ``put PATH [--name NAME] [--replace]`` (streamed; ``-`` reads
standard input), ``get NAME [-o PATH] [--range A-B]`` (``-o -``, the default, writes standard
output), ``ls``, ``rm NAME``. HTTP only: the bytes live in the hub's database."""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import sys
from pathlib import Path
from typing import Any, BinaryIO

from mycelium.cli.client import Response, _open, api_url, call, fail, print_json, query, refused, unreachable
from mycelium.cli.common import add_author, add_json, add_room, handle_of, path_part, room_of
from mycelium.core.sizes import human_size

BLOCK = 1 << 20


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("file")
    fsub = p.add_subparsers(dest="file_command", metavar="<action>")
    fsub.required = True
    put = fsub.add_parser("put", help="upload a file (PATH, or - for standard input)")
    put.add_argument("path")
    put.add_argument("--name", help="its name in the room (default: the file's own name)")
    put.add_argument("--replace", action="store_true", help="write over a file of that name")
    _common(put, author=True)
    put.set_defaults(func=_put)
    get = fsub.add_parser("get", help="download a file (to standard output unless -o)")
    get.add_argument("name")
    get.add_argument("-o", "--output", default="-", help="where to write it (default -: standard output)")
    get.add_argument("--range", help="bytes A-B (or A-, or -N) of it")
    _common(get)
    get.set_defaults(func=_get)
    ls = fsub.add_parser("ls", help="the room's files")
    _common(ls)
    ls.set_defaults(func=_ls)
    rm = fsub.add_parser("rm", help="remove a file")
    rm.add_argument("name")
    _common(rm)
    rm.set_defaults(func=_rm)


def _common(p: argparse.ArgumentParser, *, author: bool = False) -> None:
    add_room(p)
    if author:
        add_author(p)
    add_json(p)


def _base(args: argparse.Namespace) -> str:
    return f"/api/rooms/{path_part(room_of(args))}/files"


def line(f: dict[str, Any]) -> str:
    size = human_size(f["size"])
    return f"{f['name']}\t{size}\t{f['content_type']}\t{f['sha256'][:12]}\t@{f['created_by']}"


def _put(args: argparse.Namespace) -> int:
    source: BinaryIO
    if args.path == "-":
        source, length, name = sys.stdin.buffer, None, args.name
        if not name:
            fail("file put -: give the file's name with --name")
    else:
        path = Path(args.path)
        if not path.is_file():
            fail(f"file put: {path} is not a file")
        source, length, name = open(path, "rb"), path.stat().st_size, args.name or path.name  # noqa: SIM115
    params = {"name": name, "created_by": handle_of(args), "replace": args.replace or None}
    conn, target, headers = _open(api_url() + _base(args) + query(params), 600.0)
    try:
        headers["Content-Type"] = "application/octet-stream"
        if length is not None:
            headers["Content-Length"] = str(length)
            conn.request("POST", target, body=source, headers=headers)
        else:  # standard input: sent in chunks as it comes
            conn.request("POST", target, body=iter(lambda: source.read(BLOCK), b""), headers=headers,
                         encode_chunked=True)
        response = conn.getresponse()
        got = Response(response.status, response.read())
    except (OSError, http.client.HTTPException) as exc:
        unreachable(exc)
    finally:
        conn.close()
        if source is not sys.stdin.buffer:
            source.close()
    if got.status >= 400:
        refused(got)
    made = got.json()
    if args.json:
        print_json(made)
    else:
        size = human_size(made["size"])
        print(f"stored {made['name']} in {room_of(args)}: {size}, {made['content_type']}, "
              f"sha256 {made['sha256']}")
    return 0


def _get(args: argparse.Namespace) -> int:
    conn, target, headers = _open(api_url() + f"{_base(args)}/{path_part(args.name)}", 600.0)
    if args.range:
        headers["Range"] = f"bytes={args.range}"
    out: BinaryIO | None = None
    try:
        conn.request("GET", target, headers=headers)
        response = conn.getresponse()
        if response.status >= 400:
            refused(Response(response.status, response.read()))
        out = sys.stdout.buffer if args.output == "-" else open(args.output + ".part", "wb")  # noqa: SIM115
        shutil.copyfileobj(response, out, BLOCK)
        out.flush()
    except (OSError, http.client.HTTPException) as exc:
        unreachable(exc)
    finally:
        conn.close()
        if out is not None and out is not sys.stdout.buffer:
            out.close()
    if args.output != "-":
        os.replace(args.output + ".part", args.output)  # (a broken download leaves no file of that name)
    return 0


def _ls(args: argparse.Namespace) -> int:
    rows = call("GET", _base(args))
    if args.json:
        print_json(rows)
    else:
        print("\n".join(line(f) for f in rows) or "(no files)")
    return 0


def _rm(args: argparse.Namespace) -> int:
    gone = call("DELETE", f"{_base(args)}/{path_part(args.name)}")
    if args.json:
        print_json(gone)
    else:
        print(f"removed {gone['name']} ({human_size(gone['size'])})")
    return 0
