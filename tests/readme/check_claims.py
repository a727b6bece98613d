#!/usr/bin/env python3
"""Checks that the tests and benchmarks the README names as evidence exist.

Usage: tests/readme/check_claims.py README.md

Beside each capability paragraph the Markdown source carries a comment that the rendered page does
not show, naming what shows the claim:
  <!-- backed-by: tests/ops/keras_reference_test.cpp "a Keras case name"; bench/bench_fusion.cpp -->
Entries are separated by `;`: a path relative to the README's directory, optionally followed by a
quoted test case name that must occur in that file. A renamed or deleted test fails this check, so
the claim beside it is looked at again. Also checks that the figures table is the one
scripts/figures writes. Exits 1 naming each broken entry.
"""

import os
import re
import shlex
import sys

BACKED = re.compile(r"<!--\s*backed-by:(.*?)-->", re.S)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    readme = os.path.abspath(sys.argv[1])
    root = os.path.dirname(readme)
    text = open(readme, encoding="utf-8").read()
    broken, entries = [], 0
    for m in BACKED.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        for entry in m.group(1).split(";"):
            if not entry.strip():
                continue
            entries += 1
            parts = shlex.split(entry)
            path, names = parts[0], parts[1:]
            full = os.path.join(root, path)
            if not os.path.exists(full):
                broken.append(f"README.md:{line}: '{path}' does not exist")
                continue
            if names and os.path.isfile(full):
                body = open(full, encoding="utf-8", errors="replace").read()
                for name in names:
                    if name not in body:
                        broken.append(f"README.md:{line}: {path} has no test named \"{name}\"")
    # The figures table is scripts/figures' output, never a hand edit.
    table = re.search(r"<!-- figures:begin -->\n(.*?)<!-- figures:end -->", text, re.S)
    if not table or not table.group(1).startswith("Measured by `scripts/figures`"):
        broken.append("README.md: the figures table between <!-- figures:begin --> and <!-- figures:end --> "
                      "is not scripts/figures' output: run scripts/figures")
    for b in broken:
        print(b)
    print(f"check_claims: {entries} entries, {len(broken)} broken")
    if entries == 0:
        print("check_claims: the README names no evidence at all")
        return 1
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
