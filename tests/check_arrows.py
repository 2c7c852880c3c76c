#!/usr/bin/env python3
"""tests/check_arrows.py - the include rule of the tree, read from the
#include "..." lines of every production C file:

    lib/      may include lib/ only (a leaf)
    backends/ may include backends/ and lib/
    api/      may include api/, backends/ and lib/
    service/  may include anything
    cli/      may include cli/ and lib/ (lockctl, a client of the API)

Prints each arrow that breaks the rule and exits 1, or prints one ok line
and exits 0. `make test` runs it first, so the rule cannot silently break.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = {
    "lib": {"lib"},
    "backends": {"backends", "lib"},
    "api": {"api", "backends", "lib"},
    "service": {"service", "api", "backends", "lib"},
    "cli": {"cli", "lib"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main():
    bad, files, arrows = [], 0, 0
    for part in sorted(ALLOWED):
        for dirpath, _, names in os.walk(os.path.join(ROOT, part)):
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                files += 1
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
                    top = target.split("/")[0]
                    if top not in ALLOWED:
                        continue  # generated (adapters.h, *.lua.h)
                    arrows += 1
                    if top not in ALLOWED[part]:
                        bad.append("%s includes %s: %s/ may include only %s" % (
                            rel, target, part, ", ".join(p + "/" for p in sorted(ALLOWED[part]))))
    if files == 0:
        print("FAIL arrows: no source files found under %s" % ROOT)
        return 1
    for line in bad:
        print("FAIL arrows: " + line)
    if bad:
        print("%d arrows break the include rule" % len(bad))
        return 1
    print("ok   arrows: %d includes in %d files follow lib <- backends <- api <- service" % (arrows, files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
