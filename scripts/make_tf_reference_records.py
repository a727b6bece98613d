#!/usr/bin/env python3
"""Writes TFRecord reference files with TensorFlow itself, for tests/serialization/tf_reference_test.cpp.

Usage: scripts/make_tf_reference_records.py [OUTPUT_DIR]   (default: tests/data/tf_records)

The files are written by tf.io.TFRecordWriter (uncompressed, GZIP and ZLIB) and hold
tf.train.Example records serialized by TensorFlow's protobuf, plus raw (non-Example) payloads and
files with no records. The Examples are written twice: examples.tfrecord* with SerializeToString()
(map entries in the order of TensorFlow's hash map), examples_deterministic.tfrecord* with
SerializeToString(deterministic=True) (map entries sorted by key bytes, except that protobuf's upb
puts a key after the keys it is a prefix of: "ab" before "a"). The default order changes from run
to run (upb's hash table is seeded per process), so regenerating rewrites examples.tfrecord*. expected.json describes what each file must decode to
("examples", shared by the Example files, which mark themselves with "serialization"), so the C++ test
checks our reader and Example decoder against TensorFlow's writer and encoder, and our writer
against TensorFlow's bytes (the uncompressed format is deterministic).

Exits 0 with a "skipping" message when tensorflow is not importable, so CI without it passes.
"""

import base64
import json
import os
import struct
import sys


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tf_records")
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf  # noqa: PLC0415 (optional dependency)
    except ImportError:
        print("skipping: tensorflow not installed (pip install tensorflow-cpu to make reference files)")
        return 0

    os.makedirs(out_dir, exist_ok=True)

    def f32(x):
        # The value a float32 feature really holds, as a Python float (exact in JSON as a double).
        return struct.unpack("<f", struct.pack("<f", x))[0]

    # Feature values chosen to exercise the wire format: multi-value lists, empty lists, negative
    # and 64-bit integers (10-byte varints), float edge values, empty and binary byte strings.
    examples = [
        {"image": ("bytes", [bytes(range(12))]), "label": ("int64", [3]),
         "scores": ("float", [0.5, -1.25, 3.0e38, 1.0e-45]), "tags": ("bytes", [b"cat", b"", b"\xff\x00"])},
        {"image": ("bytes", [bytes(12)]), "label": ("int64", [-1]),
         "ids": ("int64", [0, 1, 127, 128, 2**40, -2**63, 2**63 - 1]), "scores": ("float", [])},
        {"label": ("int64", []), "empty_bytes": ("bytes", []), "pi": ("float", [3.14159265])},
        {},
        # Several features of every kind in one Example: TensorFlow's default serialization orders
        # the map entries as its hash table holds them, the deterministic one by key bytes. Keys
        # whose byte order is not their alphabetical one ("B" < "a" < "a/b" < "ab" < "\u00e9t\u00e9"),
        # keys that are prefixes of others ("a" of "ab" and "a/b"), a Feature with no list set, an
        # empty list of each kind. The next Example's keys are prefix-free, with long lists
        # (multi-byte lengths).
        {"a": ("bytes", [b"x"]), "ab": ("float", [1.5, -0.0, 2.5e-38]), "a/b": ("int64", [5, -5]),
         "B": ("int64", [2**31, -2**31 - 1]), "zeta": ("bytes", [b"", b"\x00" * 3, "\u00e9t\u00e9".encode()]),
         "\u00e9t\u00e9": ("float", [1.0]), "unset": ("none", []),
         "empty_f": ("float", []), "empty_i": ("int64", []), "empty_b": ("bytes", [])},
        {"image/encoded": ("bytes", [bytes((i * 37) % 256 for i in range(300))]),
         "image/shape": ("int64", [10, 10, 3]), "image/class/label": ("int64", [7]),
         "image/object/bbox": ("float", [i / 64.0 - 1.0 for i in range(200)]),
         "ids": ("int64", [(-1) ** i * 3**i for i in range(40)]),
         "tokens": ("bytes", [f"token{i}".encode() for i in range(150)]),
         "weights": ("float", [f32(1.0 / (i + 1)) for i in range(33)])},
    ]

    def to_feature(kind, values):
        if kind == "none":
            return tf.train.Feature()
        if kind == "bytes":
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        if kind == "float":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def to_json(kind, values):
        if kind == "none":
            return {}
        if kind == "bytes":
            return {"bytes_list": [base64.b64encode(v).decode() for v in values]}
        if kind == "float":
            return {"float_list": [f32(v) for v in values]}
        return {"int64_list": values}

    serialized = []
    deterministic = []  # map entries sorted by key: comparable byte for byte with our encoder
    described = []
    for ex in examples:
        proto = tf.train.Example(features=tf.train.Features(
            feature={name: to_feature(kind, values) for name, (kind, values) in ex.items()}))
        serialized.append(proto.SerializeToString())
        deterministic.append(proto.SerializeToString(deterministic=True))
        assert tf.train.Example.FromString(deterministic[-1]) == proto
        assert len(deterministic[-1]) == len(serialized[-1])
        described.append({name: to_json(kind, values) for name, (kind, values) in ex.items()})

    raw = [b"", b"a", bytes(range(256)), b"x" * 1000]

    files = {}
    options = {"none": None, "gzip": "GZIP", "zlib": "ZLIB"}
    suffix = {"none": "", "gzip": ".gz", "zlib": ".zz"}
    for name, payloads, kind in (("examples.tfrecord", serialized, "examples"),
                                 ("examples_deterministic.tfrecord", deterministic, "examples"),
                                 ("raw.tfrecord", raw, "raw"), ("empty.tfrecord", [], "raw")):
        for compression, tf_name in options.items():
            file_name = name + suffix[compression]
            with tf.io.TFRecordWriter(os.path.join(out_dir, file_name), options=tf_name) as writer:
                for p in payloads:
                    writer.write(p)
            entry = {"compression": compression, "count": len(payloads),
                     "payloads": [base64.b64encode(p).decode() for p in payloads]}
            if kind == "examples":
                entry["serialization"] = "deterministic" if payloads is deterministic else "default"
            files[file_name] = entry

    # TensorFlow's own reader agrees with what we wrote (a check on this script, not on actorflow).
    for file_name, entry in files.items():
        got = [r.numpy() for r in tf.data.TFRecordDataset(
            os.path.join(out_dir, file_name), compression_type=options[entry["compression"]] or "")]
        assert [base64.b64encode(g).decode() for g in got] == entry["payloads"], file_name

    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump({"tensorflow_version": tf.__version__, "examples": described, "files": files}, f, indent=1,
                  sort_keys=True)
        f.write("\n")
    print(f"wrote {len(files)} TFRecord files and expected.json to {out_dir} (tensorflow {tf.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
