#!/usr/bin/env python3
"""Runs the workspace's test binaries in two parts (scripts/test; docs/testing.md).

1. Together: every test binary, several at a time (``--jobs``), each as ``cargo test`` runs it
   (its tests in parallel, in its package's folder), without the tests that need a quiet
   machine; and the doc tests.
2. Alone: the tests that need a quiet machine, one at a time, one binary after another.

A test says it needs a quiet machine by living in a module named ``alone`` (its path holds
``alone::``): those time a stall against a delayed-ACK timer, count the segments of a real
exchange or compare a program with itself, and a busy machine blurs what they measure; or
they take what is the host's (a watch of every socket, the policy agent's state). Inside a binary, tests that must not share it with each other hold
``nagless_test_support::exclusive()``, as under ``cargo test``.

Each binary's output is printed whole when it ends, with its time; the binaries' times are
kept (``target/test-times.json``) so that the next run starts the longest first. Ends with a
count of the binaries and tests, and exits non-zero if a binary failed.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

QUIET = "alone::"


def binaries(cargo_args):
    """The test executables `cargo test` would run: (name, folder, path, package)."""
    out = subprocess.run(
        ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics"]
        + cargo_args,
        stdout=subprocess.PIPE,
        check=True,
    ).stdout
    found = []
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        folder = os.path.dirname(msg["manifest_path"])
        package = os.path.basename(folder)
        kinds = ",".join(target["kind"])
        name = f"{package}: {kinds} {target['name']}"
        found.append((name, folder, msg["executable"], target))
    return found


def environment(folder, executable):
    """What cargo sets for a test binary it runs (those the tests read)."""
    env = dict(os.environ)
    env["CARGO_MANIFEST_DIR"] = folder
    env["CARGO"] = env.get("CARGO") or shutil.which("cargo") or "cargo"
    deps = os.path.dirname(executable)
    debug = os.path.dirname(deps)
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in [deps, debug, env.get("LD_LIBRARY_PATH", "")] if p
    )
    return env


def run(name, argv, folder, env, lock, results):
    """Runs one binary (or cargo's doc tests); prints its output whole when it ends."""
    start = time.monotonic()
    p = subprocess.run(
        argv,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    took = time.monotonic() - start
    text = p.stdout.decode(errors="replace")
    passed = failed = 0
    for m in re.finditer(r"^test result: \w+\. (\d+) passed; (\d+) failed", text, re.M):
        passed += int(m.group(1))
        failed += int(m.group(2))
    ok = p.returncode == 0
    with lock:
        sys.stdout.write(f"\n== {name} ({took:.1f} s{'' if ok else ', FAILED'})\n{text}")
        sys.stdout.flush()
        results.append((name, took, passed, failed, ok))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=3, help="binaries run together (part 1)")
    ap.add_argument(
        "--part",
        choices=["both", "together", "alone"],
        default="both",
        help="run one part only",
    )
    ap.add_argument("cargo_args", nargs="*", help="for cargo test (--workspace, features)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.chdir(root)
    target_dir = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    times_file = os.path.join(target_dir, "test-times.json")
    try:
        with open(times_file) as f:
            last = json.load(f)
    except (OSError, ValueError):
        last = {}
    bins = binaries(a.cargo_args)
    lock = threading.Lock()
    results = []
    began = time.monotonic()

    # 1. Together, the longest (as last measured) first.
    jobs = [
        (name, [path, "--skip", QUIET], folder, environment(folder, path))
        for name, folder, path, _ in bins
    ]
    jobs.append(("doc tests", ["cargo", "test", "--doc"] + a.cargo_args, root, dict(os.environ)))
    jobs.sort(key=lambda j: -last.get(j[0], 1e9))
    if a.part == "alone":
        jobs = []
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        started = [
            (name, pool.submit(run, name, argv, folder, env, lock, results))
            for name, argv, folder, env in jobs
        ]
    for name, f in started:
        if f.exception() is not None:
            # (It could not start: named among the failed.)
            print(f"\n== {name}: {f.exception()}")
            results.append((name, 0.0, 0, 0, False))
    together = time.monotonic() - began

    # 2. Alone: only binaries that hold such tests run (--list says which).
    alone_began = time.monotonic()
    for name, folder, path, _ in bins if a.part != "together" else []:
        env = environment(folder, path)
        listed = subprocess.run(
            [path, "--list", QUIET], cwd=folder, env=env, stdout=subprocess.PIPE
        )
        if listed.returncode != 0:
            print(f"\n== {name}: --list failed (exit {listed.returncode})")
            results.append((name + " (alone)", 0.0, 0, 0, False))
            continue
        if ": test" not in listed.stdout.decode(errors="replace"):
            continue
        run(name + " (alone)", [path, QUIET, "--test-threads=1"], folder, env, lock, results)
    alone = time.monotonic() - alone_began

    times = {}
    for name, took, _, _, _ in results:
        base = name.removesuffix(" (alone)")
        times[base] = times.get(base, 0) + took
    try:
        if a.part == "both":
            with open(times_file, "w") as f:
                json.dump(times, f, indent=0, sort_keys=True)
    except OSError:
        pass
    failed_bins = [r[0] for r in results if not r[4]]
    passed = sum(r[2] for r in results)
    failed = sum(r[3] for r in results)
    print(
        f"\nwall time: {together:.0f} s together ({a.jobs} at a time), {alone:.0f} s alone"
    )
    for name in failed_bins:
        print(f"failed: {name}")
    print(
        f"runs: {len(results)} (the binaries, their alone parts, the doc tests), "
        f"{len(failed_bins)} failed; {passed} tests passed, {failed} failed"
    )
    return 1 if failed_bins else 0


if __name__ == "__main__":
    sys.exit(main())
