"""``mycelium memory``: set, get, ls, search, rm, history, links."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mycelium.cli.client import call, fail, print_json, refused, request
from mycelium.cli.common import (
    add_author,
    add_json,
    add_room,
    handle_of,
    human_fields,
    key_values,
    path_part,
    room_of,
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("memory")
    msub = p.add_subparsers(dest="memory_command", metavar="<action>")
    msub.required = True

    s = msub.add_parser("set", help="write a memory (upsert; version +1)")
    s.add_argument("key")
    s.add_argument("text", nargs="?", help="the body (or use -f)")
    s.add_argument("-f", "--file", help="read the body from a file ('-' for stdin)")
    s.add_argument("-m", "--meta", action="append", default=[], metavar="K=V",
                   help="frontmatter field (a JSON literal such as true, 3, [\"a\"] as typed, else the "
                        "text; repeatable)")
    s.add_argument("-t", "--tags", help="comma-separated tags")
    s.add_argument("--base-version", type=int, help="refuse (409) unless the memory is at this version")
    s.add_argument("--no-embed", action="store_true", help="keep the previous vector")
    s.add_argument("--expandable", action="store_true", help="allow ![[transclusion]] of this memory")
    add_room(s)
    add_author(s)
    add_json(s)
    s.set_defaults(func=_set)

    g = msub.add_parser("get", help="read a memory")
    g.add_argument("key")
    g.add_argument("--raw", action="store_true", help="print only the body")
    g.add_argument("--expand", action="store_true",
                   help="pull in ![[transclusions]] (a marker that cannot be expanded stays as written)")
    add_room(g)
    add_json(g)
    g.set_defaults(func=_get)

    ls = msub.add_parser("ls", help="list memories (newest first)")
    ls.add_argument("prefix", nargs="?", default="")
    ls.add_argument("--limit", type=int, default=100)
    ls.add_argument("--offset", type=int, default=0)
    add_room(ls)
    add_json(ls)
    ls.set_defaults(func=_ls)

    se = msub.add_parser("search", help="semantic + full-text search")
    se.add_argument("query")
    se.add_argument("--limit", type=int, default=10)
    se.add_argument("--tag", action="append", dest="tags", help="only memories with this tag (repeatable)")
    se.add_argument("--min-similarity", type=float, default=0.0)
    add_room(se)
    add_json(se)
    se.set_defaults(func=_search)

    rm = msub.add_parser("rm", help="delete a memory (its history stays)")
    rm.add_argument("key")
    add_room(rm)
    add_author(rm)
    rm.set_defaults(func=_rm)

    h = msub.add_parser("history", help="every version of a memory")
    h.add_argument("key")
    add_room(h)
    add_json(h)
    h.set_defaults(func=_history)

    lk = msub.add_parser("links", help="what a memory links to, and what links to it")
    lk.add_argument("key")
    lk.add_argument("--check", action="store_true", help="exit 1 if any of its own links is broken")
    add_room(lk)
    add_json(lk)
    lk.set_defaults(func=_links)

    sb = msub.add_parser("subscribe", help="follow the memories under a prefix (mycelium events shows them)")
    sb.add_argument("prefix", nargs="?", default="", help="a key prefix (default: every memory of the room)")
    us = msub.add_parser("unsubscribe", help="stop following a prefix")
    us.add_argument("prefix", nargs="?", default="")
    subs = msub.add_parser("subscriptions", help="who follows which prefixes in the room (--as: yours)")
    for q, func in ((sb, _subscribe), (us, _unsubscribe), (subs, _subscriptions)):
        add_room(q)
        add_author(q)
        add_json(q)
        q.set_defaults(func=func)


def _set(args: argparse.Namespace) -> int:
    if args.file:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    elif args.text is not None:
        text = args.text
    else:
        fail("give the body as an argument or with -f FILE")
    meta = key_values(args.meta, "--meta")
    if args.expandable:
        meta["expandable"] = True
    item: dict[str, Any] = {"key": args.key, "value": text, "created_by": handle_of(args),
                            "embed": not args.no_embed}
    if meta:
        item["meta"] = meta
    if args.tags:
        item["tags"] = [t.strip() for t in args.tags.split(",") if t.strip()]
    if args.base_version is not None:
        item["base_version"] = args.base_version
    rows = call("POST", f"/api/rooms/{path_part(room_of(args))}/memory", json_body={"items": [item]})
    if args.json:
        print_json(rows[0])
    else:
        print(f"{rows[0]['key']} v{rows[0]['version']}  thread {rows[0]['episode'].rsplit(':', 1)[-1]}")
    return 0


def _get(args: argparse.Namespace) -> int:
    m = call("GET", f"/api/rooms/{path_part(room_of(args))}/memory/{path_part(args.key)}")
    body = m["value"].get("text")
    if body is None:
        import yaml

        body = yaml.safe_dump(m["value"], sort_keys=False)
    if args.expand:
        expanded = _expand(args)
        body = m["expanded"] = expanded["rendered"]
        m["expansions"] = expanded["expansions"]
    if args.json:
        print_json(m)
    elif args.raw:
        print(body)
    else:
        print(f"# {m['key']}  (v{m['version']}, by {m['updated_by']}, {m['updated_at']})")
        print(f"thread: {m['episode']}")
        if m["tags"]:
            print(f"tags: {', '.join(m['tags'])}")
        if m["meta"]:
            print(human_fields(m["meta"]))
        print()
        print(body)
    return 0


def _expand(args: argparse.Namespace) -> dict[str, Any]:
    """The body with transclusions pulled in; each one that failed is named on stderr."""
    expanded: dict[str, Any] = call("GET", f"/api/rooms/{path_part(room_of(args))}/links/expand",
                                    params={"key": args.key})
    for e in expanded["expansions"]:
        if not e["expanded"]:
            print(f"not expanded: {e['raw']} ({e['error']})", file=sys.stderr)
    return expanded


def _ls(args: argparse.Namespace) -> int:
    response = request("GET", f"/api/rooms/{path_part(room_of(args))}/memory",
                       params={"prefix": args.prefix, "limit": args.limit, "offset": args.offset})
    if response.status >= 400:
        refused(response)
    rows = response.json()
    if args.json:
        print_json(rows)
        return 0
    for m in rows:
        print(f"{m['key']}  v{m['version']}  {m['updated_by']}  {m['updated_at']}")
    total = int(response.headers.get("x-total-count") or 0)
    after = args.offset + len(rows)
    if rows and total > after:
        print(f"… {total - after} more (use --offset {after})", file=sys.stderr)
    return 0


def _search(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"query": args.query, "limit": args.limit, "min_similarity": args.min_similarity}
    if args.tags:
        body["tags_filter"] = args.tags
    result = call("POST", f"/api/rooms/{path_part(room_of(args))}/memory/search", json_body=body)
    if args.json:
        print_json(result)
        return 0
    for hit in result["results"]:
        m = hit["memory"]
        sim = "  -  " if hit["similarity"] is None else f"{hit['similarity']:.3f}"
        first = (m["value"].get("text") or "").strip().splitlines()
        print(f"{sim}  {m['key']}  {first[0][:80] if first else ''}")
    return 0


def _rm(args: argparse.Namespace) -> int:
    call("DELETE", f"/api/rooms/{path_part(room_of(args))}/memory/{path_part(args.key)}",
         params={"by": handle_of(args)})
    print(f"deleted {args.key}")
    return 0


def _history(args: argparse.Namespace) -> int:
    h = call("GET", f"/api/rooms/{path_part(room_of(args))}/history/{path_part(args.key)}")
    if args.json:
        print_json(h)
        return 0
    for v in h["versions"]:
        text = ((v.get("value") or {}).get("text") or "").strip().splitlines()
        first = text[0][:60] if text else ""
        print(f"v{v['version']}  {v['op']:<6}  {v['written_by']}  {v['written_at']}  {first}")
    return 0


def _link_line(link: dict[str, Any], *, source: bool) -> str:
    where = link["target"] + (f"#{link['anchor']}" if link["anchor"] else "")
    kind = link["relation"] or link["kind"]
    state = "ok" if link["resolved"] else link["error"]
    first = f"{link['source']} -> " if source else ""
    return f"  {first}{where}  [{kind}]  {state}"


def _links(args: argparse.Namespace) -> int:
    result = call("GET", f"/api/rooms/{path_part(room_of(args))}/links", params={"key": args.key})
    broken = [link for link in result["outbound"] if not link["resolved"]]
    if args.json:
        print_json(result)
    else:
        missing = "" if result["found"] else "  (no such memory)"
        print(f"{result['key']}: {len(result['outbound'])} out, {len(result['backlinks'])} in{missing}")
        for link in result["outbound"]:
            print(_link_line(link, source=False))
        if result["backlinks"]:
            print("linked from:")
            for link in result["backlinks"]:
                print(_link_line(link, source=True))
    if args.check and broken:
        for link in broken:
            print(f"broken: {link['raw']} ({link['error']})", file=sys.stderr)
        return 1
    return 0


def _subscribe(args: argparse.Namespace) -> int:
    made = call("POST", f"/api/rooms/{path_part(room_of(args))}/subscriptions",
                json_body={"handle": handle_of(args), "prefix": args.prefix})
    if args.json:
        print_json(made)
    else:
        print(f"@{made['handle']} follows {made['prefix'] or 'every memory'} in {made['room']} "
              f"(mycelium events --as {made['handle']})")
    return 0


def _unsubscribe(args: argparse.Namespace) -> int:
    gone = call("DELETE", f"/api/rooms/{path_part(room_of(args))}/subscriptions",
                params={"handle": handle_of(args), "prefix": args.prefix})
    if args.json:
        print_json(gone)
    else:
        print(f"@{gone['handle']} no longer follows {gone['prefix'] or 'every memory'} in {gone['room']}")
    return 0


def _subscriptions(args: argparse.Namespace) -> int:
    rows = call("GET", f"/api/rooms/{path_part(room_of(args))}/subscriptions",
                params={"handle": args.handle} if args.handle else None)
    if args.json:
        print_json(rows)
    else:
        print("\n".join(f"@{r['handle']}\t{r['prefix'] or '(every memory)'}" for r in rows) or "(none)")
    return 0
