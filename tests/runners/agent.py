"""A one-shot agent a runner starts in the tests: it notes its start (pid and job) in the file its
first argument names, sleeps ``--sleep`` seconds unless the file ``--once`` names exists (which it
then creates: a second start does not sleep), takes its next message with ``mycelium await`` and
answers it with ``mycelium respond``, as a real agent CLI would."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("record")
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--once")
    p.add_argument("--fail", action="store_true", help="exit 3 at once")
    args = p.parse_args()
    with open(args.record, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "job": os.environ.get("MYCELIUM_JOB"), "at": time.time(),
                            "cwd": os.getcwd(), "handle": os.environ.get("MYCELIUM_HANDLE")}) + "\n")
    if args.fail:
        print("this agent always fails", file=sys.stderr)
        return 3
    if args.once and not Path(args.once).exists():
        Path(args.once).write_text("slept")
        time.sleep(args.sleep)
    handle, room = os.environ["MYCELIUM_HANDLE"], os.environ["MYCELIUM_ROOM"]
    got = subprocess.run([sys.executable, "-m", "mycelium.cli.main", "await", "--handle", handle, "-r", room,
                          "--timeout", "10", "--json"], capture_output=True, text=True, check=True)
    message = json.loads(got.stdout)
    subprocess.run([sys.executable, "-m", "mycelium.cli.main", "respond", "--handle", handle, "-r", room,
                    f"done: {message['prompt']}"], check=True, capture_output=True)
    print(f"answered {message['message_id']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
