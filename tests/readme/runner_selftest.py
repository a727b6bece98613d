#!/usr/bin/env python3
"""Checks that the README checks can fail: run_readme.py on a README whose step making a file is
gone, a background server that never says it is ready, a Python check that fails for real; and
extract_cpp.py on a drifted excerpt and an overflowing int shift. Exits 0 when every case is
caught, 1 naming the one that was not."""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def readme_rc(text, source):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "README.md")
        with open(path, "w") as f:
            f.write(text)
        proc = subprocess.run([sys.executable, os.path.join(HERE, "run_readme.py"), "--readme", path,
                               "--source", source, "--build", d],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return proc.returncode, proc.stdout


def extract_rc(text, source):
    with tempfile.TemporaryDirectory() as d:
        readme = os.path.join(source, "README.md")
        with open(readme, "w") as f:
            f.write(text)
        proc = subprocess.run([sys.executable, os.path.join(HERE, "extract_cpp.py"), readme,
                               os.path.join(d, "out.cpp")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return proc.returncode, proc.stdout


def main():
    failures = []
    with tempfile.TemporaryDirectory() as source:
        with open(os.path.join(source, "code.cpp"), "w") as f:
            f.write("int answer() {\n  return 42;\n}\n")
        make = "```sh\nprintf 'x\\n' > made.txt\n```\n"
        use = "```sh\ngrep -q x made.txt\n```\n"
        cases = [
            ("every step present", make + use, 0),
            ("the step making made.txt removed", use, 1),
            ("a server that never prints its ready line",
             "<!-- readme-test: ready 'never printed' -->\n```sh\nsleep 1 &\n```\n", 1),
            ("a background line without a ready directive", "```sh\nsleep 1 &\n```\n", 1),
            ("a failing command in the middle of a block", "```sh\ntrue\nfalse\ntrue\n```\n", 1),
            ("a skip-line naming no line", "<!-- readme-test: skip-line 'nothing' 'why' -->\n"
             "```sh\ntrue\n```\n", 1),
        ]
        for name, text, want in cases:
            rc, out = readme_rc(text, source)
            if (rc == 0) != (want == 0):
                failures.append(f"run_readme.py, {name}: exit {rc}, expected {want}\n{out}")
        cpp_cases = [
            ("an excerpt of code.cpp", "<!-- readme-test: in-file code.cpp -->\n```cpp\n// code.cpp\n"
             "int answer() {\n  return 42;\n```\n", 0),
            ("an excerpt that drifted", "<!-- readme-test: in-file code.cpp -->\n```cpp\n"
             "int answer() {\n  return 41;\n```\n", 1),
            ("8 << 30 as an int", "```cpp\nunsigned long n = 8 << 30;\n```\n", 1),
            ("std::size_t{8} << 30", "```cpp\nunsigned long n = std::size_t{8} << 30;\n```\n", 0),
        ]
        for name, text, want in cpp_cases:
            rc, out = extract_rc(text, source)
            if rc != want:
                failures.append(f"extract_cpp.py, {name}: exit {rc}, expected {want}\n{out}")
    for f in failures:
        print("NOT CAUGHT:", f)
    print(f"runner_selftest: {len(failures)} of {len(cases) + len(cpp_cases)} cases not caught")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
