#!/usr/bin/env python3
"""Checks that every program of the workspace builds its shared dependencies with the same
features, so that `cargo run --release -p A` after `cargo run --release -p B` reuses B's
artifacts instead of rebuilding the dependencies A shares with B under other features.

    python3 scripts/check-features.py

Cargo unifies features over the packages of one build only: `cargo run -p qwen3-df11` turns on
the features qwen3-df11's graph asks for, `cargo run -p df11-cli` those of df11-cli's (whose
server turns on, e.g., hyper's `server`). A dependency built with other features is another
artifact, and so is everything above it. `crates/workspace-hack` turns on, in every program,
the union of the features the programs ask for; this script lists each package whose features
still differ between two programs' graphs (normal and build dependencies alike) and exits
non-zero if there is one. The fix is to add the package with the missing features to
crates/workspace-hack/Cargo.toml (`[dependencies]`, or `[build-dependencies]` for a package
built for the host: a build script's or a proc macro's dependency).
"""
import json
import re
import subprocess
import sys


def programs():
    """The workspace packages with a binary target."""
    meta = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--no-deps", "--format-version", "1"], text=True
        )
    )
    return sorted(
        p["name"]
        for p in meta["packages"]
        if any("bin" in t["kind"] for t in p["targets"])
    )


def features(package, edges):
    """{(name, version): frozenset of feature lists} of `package`'s graph along `edges`."""
    out = subprocess.check_output(
        ["cargo", "tree", "-p", package, "-e", edges, "--prefix", "none", "-f", "{p} [{f}]"],
        text=True,
    )
    graph = {}
    for line in out.splitlines():
        m = re.match(r"(\S+) (v\S+)(?: \(.*?\))? \[(.*)\]", line.strip())
        if m:
            feats = frozenset(f for f in m[3].split(",") if f)
            graph.setdefault((m[1], m[2]), set()).add(feats)
    return {k: frozenset(v) for k, v in graph.items()}


def main():
    names = programs()
    # Normal dependencies (built for the target) and build dependencies (built for the host)
    # are resolved apart: compare each kind on its own.
    bad = 0
    for edges in ("normal", "build"):
        graphs = {p: features(p, edges) for p in names}
        shared = {}
        for p, g in graphs.items():
            for k, v in g.items():
                shared.setdefault(k, {})[p] = v
        for k, per in sorted(shared.items()):
            if len(per) < 2 or len(set(per.values())) == 1:
                continue
            union = set().union(*[set().union(*v) for v in per.values()])
            missing = {
                p: sorted(union - set().union(*v)) for p, v in per.items() if union - set().union(*v)
            }
            if not missing:
                continue
            bad += 1
            print(f"{edges}: {k[0]} {k[1]}: features {sorted(union)}; missing in {missing}")
    if bad:
        print(f"{bad} package(s) built with other features by different programs:"
              " add them to crates/workspace-hack/Cargo.toml", file=sys.stderr)
        sys.exit(1)
    print(f"{len(names)} programs build their shared dependencies with the same features")


main()
