#!/usr/bin/env python3
"""tests/check_sizes.py - the size rule of the production C files: no file
over 800 lines and no function over 80 lines (from the line of its name to
its closing brace), so each reads in one sitting.

    python3 tests/check_sizes.py [--list]

Prints what breaks the rule and exits 1; --list prints every function over
60 lines too. A function may be exempt by a comment on the line before its
name: /* size: whole - <why it reads better whole> */ (none today).
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("lib", "backends", "api", "service", "cli")
MAX_FILE, MAX_FUNC = 800, 80
# a function definition: a line at column 0 that is not a comment, macro or
# declaration and is followed (maybe over several lines) by "{" at column 0
NAME = re.compile(r"^(?![ \t#/*}])(?!typedef)[^=;]*?\b([a-z_][a-z0-9_]*)\s*\(")


def functions(lines):
    i = 0
    while i < len(lines):
        m = NAME.match(lines[i])
        if not m:
            i += 1
            continue
        j = i
        while j < len(lines) and j < i + 12 and lines[j] != "{" and not lines[j].rstrip().endswith(";"):
            j += 1
        if j >= len(lines) or lines[j] != "{":
            i += 1
            continue
        k = j + 1
        while k < len(lines) and lines[k] != "}":
            k += 1
        exempt = i > 0 and "size: whole" in lines[i - 1]
        yield m.group(1), i + 1, k - i + 1, exempt
        i = k + 1


def main():
    listing = "--list" in sys.argv
    bad = []
    for part in PARTS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, part)):
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8") as f:
                    lines = f.read().split("\n")
                if len(lines) - 1 > MAX_FILE:
                    bad.append("%s: %d lines (at most %d)" % (rel, len(lines) - 1, MAX_FILE))
                for fn, line, n, exempt in functions(lines):
                    if n > MAX_FUNC and not exempt:
                        bad.append("%s:%d: %s() is %d lines (at most %d)" % (rel, line, fn, n, MAX_FUNC))
                    elif listing and n > 60:
                        print("     %s:%d: %s() is %d lines%s" % (rel, line, fn, n, " (exempt)" if exempt else ""))
    for b in bad:
        print("FAIL sizes: " + b)
    if bad:
        return 1
    print("ok   sizes: no file over %d lines, no function over %d" % (MAX_FILE, MAX_FUNC))
    return 0


if __name__ == "__main__":
    sys.exit(main())
