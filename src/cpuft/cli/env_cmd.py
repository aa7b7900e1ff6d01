"""``cpuft env lock|bootstrap|verify|hash``: identical nodes from a lock file, not an image."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("env", help="lock, reproduce and verify a node's software",
                       description="Make identical nodes from a lock file instead of an image.")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    lock = verbs.add_parser("lock", help="write the exact versions of Python and every package "
                                         "cpuft needs, with a hash")
    lock.add_argument("--output", "-o", help="file to write (default: stdout)")
    boot = verbs.add_parser("bootstrap", help="print a shell script (also cloud-init user data) "
                                              "that makes a Debian/Ubuntu server match a lock")
    boot.add_argument("--lock", help="lock file (default: this node's versions)")
    boot.add_argument("--prefix", default="/opt/cpuft", help="where the venv goes")
    boot.add_argument("--cpuft-source", default="",
                      help="pip spec for cpuft itself (a wheel, a git URL; default cpuft==VER)")
    verify = verbs.add_parser("verify", help="compare this node with a lock; exit 1 if they differ")
    verify.add_argument("--lock", required=True, help="lock file ('-' for stdin)")
    verify.add_argument("--json", action="store_true")
    verbs.add_parser("hash", help="print this node's lock hash")
    p.set_defaults(handler=run)


def _load(path: str) -> dict[str, Any]:
    from cpuft.envlock import read_lock
    from cpuft.errors import CpuftError

    if path == "-":
        return read_lock(sys.stdin.read(), "stdin")
    try:
        return read_lock(Path(path).read_text(), path)
    except OSError as e:
        raise CpuftError(f"cannot read lock file {path}: {e.strerror}") from None


def run(args: argparse.Namespace) -> int:
    from cpuft.cli.output import write_file
    from cpuft.envlock import bootstrap_script, differences, make_lock

    if args.verb == "lock":
        text = json.dumps(make_lock(), indent=2) + "\n"
        if args.output:
            write_file(args.output, text, "--output")
            print(f"wrote {args.output} (hash {json.loads(text)['hash']})", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    if args.verb == "hash":
        print(make_lock()["hash"])
        return 0
    if args.verb == "bootstrap":
        lock = _load(args.lock) if args.lock else make_lock()
        sys.stdout.write(bootstrap_script(lock, args.prefix, args.cpuft_source))
        return 0
    lock, here = _load(args.lock), make_lock()
    diffs = differences(lock, here)
    if args.json:
        print(json.dumps({"match": not diffs, "lock": lock["hash"], "here": here["hash"],
                          "differences": [dict(zip(("package", "locked", "here"), d,
                                                   strict=True)) for d in diffs]}))
    elif diffs:
        print(f"this node differs from lock {lock['hash']}:")
        for name, want, have in diffs:
            print(f"  {name:24} locked {want or '(absent)':14} here {have or '(absent)'}")
    else:
        print(f"this node matches lock {lock['hash']}")
    return 1 if diffs else 0
