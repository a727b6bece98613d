#!/usr/bin/env python3
"""Runs the shell blocks of a Markdown file the way a newcomer would: in order, from one new
temporary directory, each block as a bash script with `set -euo pipefail`.

Usage: tests/readme/run_readme.py --readme README.md --source SRC --build BUILD [--keep] [--only N]

The temporary directory holds a link to each top-level entry of SRC (scripts/, bench/, tests/, ...)
except build trees, and `build` links to BUILD, so `./build/apps/actorflow ...` is the program under
test. Everything a block reads must come from SRC or from an earlier block: a README that forgets
the step making a file fails here.

A block may carry directives in an HTML comment on the line just above its fence (invisible when
the Markdown is rendered), tokens in shell quoting:
  <!-- readme-test: skip 'why, and what in the suite covers it instead' -->
  <!-- readme-test: skip-line 'text of the line' 'why' -->          a line the suite cannot run
  <!-- readme-test: replace 'old' 'new' -->                           e.g. a prefix outside /tmp
  <!-- readme-test: ports 8501 8500 -->        these numbers become free ports in this block
  <!-- readme-test: ready 'serving: ready' -->  a line ending in `&` runs in the background and the
                                                block goes on once its output shows this text
  <!-- readme-test: cmake-project tests/install_consumer/main.cpp -->   a ```cmake block: written
                                                as CMakeLists.txt beside that main.cpp, configured
                                                against the prefix of an earlier block, built, run
A `python3 scripts/check_*.py` line that exits 77 (its package is not installed) counts as
skipped and is reported, never as passed silently. ```cpp blocks are compiled by
tests/readme/extract_cpp.py into the build (readme_snippets), not here.
"""

import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

DIRECTIVE = re.compile(r"^<!--\s*readme-test:(.*)-->\s*$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


def parse_blocks(text):
    """Yields (line number, language, body, directives) for each fenced block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(2):
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i + 1
        directives = []
        if i > 0:
            d = DIRECTIVE.match(lines[i - 1].strip())
            if d:
                directives = shlex.split(d.group(1))
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise SystemExit(f"README line {start}: a ``` block is never closed")
        yield start, lang, "\n".join(body) + "\n", directives
        i += 1


def parse_directives(tokens, where):
    """Turns a block's directive tokens into a dict; an unknown or incomplete one is an error."""
    arity = {"skip": 1, "skip-line": 2, "replace": 2, "ready": 1, "cmake-project": 1, "given": 1,
             "in-file": 1, "namespace-scope": 0}
    out = {"replace": [], "skip-line": [], "ports": []}
    i = 0
    while i < len(tokens):
        key = tokens[i]
        if key == "ports":
            i += 1
            while i < len(tokens) and tokens[i].isdigit():
                out["ports"].append(tokens[i])
                i += 1
            continue
        if key not in arity:
            raise SystemExit(f"{where}: unknown readme-test directive '{key}'")
        args = tokens[i + 1:i + 1 + arity[key]]
        if len(args) != arity[key]:
            raise SystemExit(f"{where}: directive '{key}' takes {arity[key]} argument(s)")
        if key in ("replace", "skip-line"):
            out[key].append(tuple(args))
        else:
            out[key] = args[0] if args else True
        i += 1 + arity[key]
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PRELUDE = r"""
set -euo pipefail
af_background=0
# Waits until a background command's log shows TEXT (or it exits, or 120 s pass).
af_wait_ready() {
  local log=$1 text=$2 pid=$3 waited=0
  until grep -qF -- "$text" "$log"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "readme-test: the background command exited before printing '$text':" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
    if [ "$waited" -gt 1200 ]; then
      echo "readme-test: no '$text' after 120 s:" >&2
      cat "$log" >&2
      return 1
    fi
  done
}
# A Python check whose package is missing exits 77: reported, not counted as passed.
af_allow_skip() {
  local rc=$1
  if [ "$rc" -eq 77 ]; then echo "readme-test: SKIPPED (package not installed): $2"; return 0; fi
  return "$rc"
}
# A job may end between `jobs -p` and `kill`: that is not the block failing (set -e runs in traps).
trap 'jobs -p | xargs -r kill 2>/dev/null || true; wait' EXIT
"""


def join_continuations(body):
    """Joins `\\`-continued lines so that each command is one line."""
    out, pending = [], ""
    for line in body.split("\n"):
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            out.append(pending + line)
            pending = ""
    return out


def split_comment(line):
    """Splits `command  # comment` at the first # that starts a shell comment outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def shell_script(body, directives, where, notes, tag):
    for old, new in directives["replace"]:
        if old not in body:
            raise SystemExit(f"{where}: replace '{old}': the block has no such text")
        body = body.replace(old, new)
    for port in directives["ports"]:
        body = re.sub(rf"\b{port}\b", str(free_port()), body)
    script, background = [PRELUDE], 0
    for line in join_continuations(body):
        skipped = [reason for text, reason in directives["skip-line"] if text in line]
        if skipped:
            notes.append(f"{where}: not run: `{line.strip()}` ({skipped[0]})")
            continue
        command, _ = split_comment(line)
        if command.endswith("&") and not command.endswith("&&"):
            if "ready" not in directives:
                raise SystemExit(f"{where}: `{command}` runs in the background: say what it prints "
                                 "when ready (directive ready '...')")
            background += 1
            log = f".readme-{tag}-background-{background}.log"
            script.append(f": > {log}")
            script.append(f"{command[:-1].rstrip()} > {log} 2>&1 &")
            script.append(f"af_wait_ready {log} {shlex.quote(directives['ready'])} $!")
        elif re.match(r"^\s*(/usr/bin/)?python3 scripts/check_\w+\.py", command):
            script.append(f"{command} || af_allow_skip $? {shlex.quote(command.strip())}")
        else:
            script.append(line)
    for text, _ in directives["skip-line"]:
        if text not in body:
            raise SystemExit(f"{where}: skip-line '{text}': the block has no such line")
    return "\n".join(script) + "\n"


def run(script, cwd, env, where, log_name):
    path = os.path.join(cwd, log_name)
    with open(path + ".sh", "w") as f:
        f.write(script)
    start = time.monotonic()
    proc = subprocess.run(["bash", path + ".sh"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    took = time.monotonic() - start
    for line in proc.stdout.splitlines():
        if line.startswith("readme-test: SKIPPED"):
            print(f"{where}: {line}")
    if proc.returncode != 0:
        print(proc.stdout[-8000:])
        print(f"readme-test: FAILED: {where} exited {proc.returncode} after {took:.1f} s "
              f"(script: {path}.sh)")
        return False
    print(f"{where}: ran in {took:.1f} s")
    return True


def run_cmake_project(body, directives, source, cwd, env, where):
    """Builds a ```cmake block as a project's CMakeLists.txt against the prefix an earlier block
    installed (the block's own comment names -DCMAKE_PREFIX_PATH)."""
    for old, new in directives["replace"]:
        body = body.replace(old, new)
    main_cpp = directives["cmake-project"]
    prefix = re.search(r"-DCMAKE_PREFIX_PATH=(\S+)", body)
    if not prefix:
        raise SystemExit(f"{where}: the CMake block should say which -DCMAKE_PREFIX_PATH to use")
    project = os.path.join(cwd, "readme-cmake-project")
    os.makedirs(project, exist_ok=True)
    with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
        f.write(body)
    shutil.copy(os.path.join(source, main_cpp), project)
    name = re.search(r"add_executable\((\w+)", body).group(1)
    script = PRELUDE + (
        f"cmake -S readme-cmake-project -B readme-cmake-project/build -G Ninja "
        f"-DCMAKE_PREFIX_PATH={prefix.group(1)} > readme-cmake-project/configure.log\n"
        f"ninja -C readme-cmake-project/build > readme-cmake-project/build.log\n"
        f"readme-cmake-project/build/{name}\n")
    return run(script, cwd, env, where, "readme-cmake-project")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--only", type=int, default=0, help="stop after N blocks (debugging)")
    args = ap.parse_args()
    source, build = os.path.abspath(args.source), os.path.abspath(args.build)
    text = open(args.readme, encoding="utf-8").read()
    work = tempfile.mkdtemp(prefix="actorflow-readme-")
    for entry in sorted(os.listdir(source)):
        if entry.startswith("build") or entry.startswith("."):
            continue
        os.symlink(os.path.join(source, entry), os.path.join(work, entry))
    os.symlink(build, os.path.join(work, "build"))
    # A build tree configured through the `build` link would take the link's path as its own.
    env = dict(os.environ, AF_SOURCE_DIR=source, AF_BUILD_DIR=build)
    notes, ok, ran, count = [], True, 0, 0
    for line, lang, body, tokens in parse_blocks(text):
        where = f"{os.path.basename(args.readme)}:{line}"
        directives = parse_directives(tokens, where)
        if lang not in ("sh", "cmake"):
            continue
        count += 1
        if args.only and count > args.only:
            break
        if "skip" in directives:
            notes.append(f"{where}: block not run: {directives['skip']}")
            continue
        if lang == "cmake":
            if "cmake-project" not in directives:
                raise SystemExit(f"{where}: a cmake block needs cmake-project or skip")
            ok = run_cmake_project(body, directives, source, work, env, where)
        else:
            ok = run(shell_script(body, directives, where, notes, f"block-{line}"), work, env, where,
                     f"block-{line}")
        if not ok:
            break
        ran += 1
    for n in notes:
        print(n)
    print(f"readme-test: {ran} blocks ran, {len(notes)} parts not run (reasons above), in {work}")
    if ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
