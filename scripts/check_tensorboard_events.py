#!/usr/bin/env python3
"""Checks that TensorBoard itself reads our events files (serialization/tfevents.hpp).

Usage: scripts/check_tensorboard_events.py LOGDIR [--expect-tags epoch_loss,epoch_accuracy]
  e.g. cd "$(mktemp -d)"; actorflow demo --epochs 2   # exits 1 below 97% test accuracy, so no &&
       python3 scripts/check_tensorboard_events.py actorflow_demo_logs

Loads every run under LOGDIR (each directory holding events.out.tfevents.* files, e.g. train and
validation) with TensorBoard's EventAccumulator, prints each run's scalar tags and (step, value)
points, and checks: each expected tag is present in every run; every tag's steps strictly increase;
values and wall times are finite (wall times > 0); the file_version event was seen (version 2); and
TensorBoard logged nothing about the files (truncated records / CRC failures are only logged at
DEBUG level by its loader, so those are caught here too). Ends with one JSON line
{"runs": {RUN: {"tags": [...], "points": N}}, "ok": true}. Exits 0 when all checks pass, 1 naming
the run and tag on failure, 77 (skip) when tensorboard is not installed.
"""

import argparse
import json
import logging
import math
import os
import sys


class _Collect(logging.Handler):
    """Keeps TensorBoard's warnings and its DEBUG notes about bad records."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.problems = []

    def emit(self, record):
        msg = record.getMessage()
        if record.levelno >= logging.WARNING or "Truncated record" in msg or "crc" in msg.lower():
            self.problems.append(f"{record.levelname}: {msg}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir")
    parser.add_argument("--expect-tags", default="epoch_loss,epoch_accuracy")
    args = parser.parse_args()
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: PLC0415
    except ImportError:
        print("tensorboard is not installed (pip install tensorboard); skipped")
        return 77
    collect = _Collect()
    tb_logger = logging.getLogger("tensorboard")
    tb_logger.setLevel(logging.DEBUG)
    tb_logger.addHandler(collect)

    expected = [t for t in args.expect_tags.split(",") if t]
    runs = sorted({os.path.relpath(d, args.logdir) for d, _, files in os.walk(args.logdir)
                   if any(ea.io_wrapper.IsTensorFlowEventsFile(f) for f in files)})
    if not runs:
        print(f"FAIL: no events.out.tfevents.* files under {args.logdir}")
        return 1
    summary, failures = {}, []
    for run in runs:
        acc = ea.EventAccumulator(os.path.join(args.logdir, run), size_guidance={ea.SCALARS: 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        print(f"run {run}: file_version={acc.file_version} scalar tags {tags}")
        if acc.file_version != 2:
            failures.append(f"run {run}: file_version event missing or not 2 (got {acc.file_version})")
        points = 0
        for tag in tags:
            events = acc.Scalars(tag)
            points += len(events)
            print(f"  {tag}: {[(e.step, e.value) for e in events]}")
            steps = [e.step for e in events]
            if any(b <= a for a, b in zip(steps, steps[1:])):
                failures.append(f"run {run} tag {tag}: steps not strictly increasing: {steps}")
            if not all(math.isfinite(e.value) for e in events):
                failures.append(f"run {run} tag {tag}: non-finite value")
            if not all(math.isfinite(e.wall_time) and e.wall_time > 0 for e in events):
                failures.append(f"run {run} tag {tag}: bad wall_time {[e.wall_time for e in events]}")
        failures += [f"run {run} tag {t}: expected tag missing" for t in expected if t not in tags]
        summary[run] = {"tags": tags, "points": points}
    failures += [f"tensorboard logged {p}" for p in collect.problems]
    for failure in failures:
        print(f"FAIL: {failure}")
    print(json.dumps({"runs": summary, "ok": not failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
