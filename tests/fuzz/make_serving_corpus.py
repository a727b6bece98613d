#!/usr/bin/env python3
"""Writes the seed corpora of the serving fuzz targets (rest_predict, tensor_proto, serving_config,
warmup, rest_inference) under tests/fuzz/corpus/. Protobuf messages and TFRecord framing are encoded here by hand
(field numbers from apps/serving/protos/), so no package beyond Python itself is needed:
    python3 tests/fuzz/make_serving_corpus.py tests/fuzz/corpus
"""
import os
import struct
import sys


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, wire, payload):
    key = varint(number << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def tensor(dtype, dims, content=None, floats=None, ints=None, int64s=None, bools=None, halves=None, strings=None):
    shape = b"".join(field(2, 2, field(1, 0, d)) for d in dims)
    out = field(1, 0, dtype) + field(2, 2, shape)
    if content is not None:
        out += field(4, 2, content)
    if floats is not None:
        out += field(5, 2, b"".join(struct.pack("<f", f) for f in floats))
    if ints is not None:
        out += field(7, 2, b"".join(varint(i) for i in ints))
    if strings is not None:  # string_val: repeated bytes, one field each
        out += b"".join(field(8, 2, s) for s in strings)
    if int64s is not None:
        out += field(10, 2, b"".join(varint(i) for i in int64s))
    if bools is not None:
        out += field(11, 2, bytes(bools))
    if halves is not None:
        out += field(13, 2, b"".join(varint(h) for h in halves))
    return out


DT_FLOAT, DT_INT32, DT_UINT8, DT_INT8, DT_STRING, DT_INT64, DT_BOOL, DT_HALF = 1, 3, 4, 6, 7, 9, 10, 19


def predict_log(signature, inputs):
    spec = field(1, 2, b"m") + (field(3, 2, signature.encode()) if signature else b"")
    request = field(1, 2, spec)
    for name, t in inputs:
        request += field(2, 2, field(1, 2, name.encode()) + field(2, 2, t))
    return field(6, 2, field(1, 2, request))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(records):
    out = b""
    for r in records:
        length = struct.pack("<Q", len(r))
        out += length + struct.pack("<I", masked(length)) + r + struct.pack("<I", masked(r))
    return out


def write(root, target, name, data):
    path = os.path.join(root, target, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main(root):
    # rest_predict: a signature byte (see fuzz_rest_predict.cpp), then a body.
    bodies = [
        (0, '{"instances": [[1.0, 2.5, -3e-2, 4]]}'),
        (0, '{"signature_name": "serving_default", "inputs": [[0.347, 1, 2, 3], [4, 5, 6, 7]]}'),
        (0, '{"instances": [{"x": [1, 2, 3, 4]}]}'),
        (1, '{"instances": [[[1, 2], [3, 4], [5, 6]]]}'),
        (1, '{"instances": [{"b64": "AQIDBAUG"}]}'),
        (2, '{"instances": [9007199254740993, -0, 12]}'),
        (3, '{"inputs": [[127, -128]]}'),
        (4, '{"instances": [[0.5, 65504]]}'),
        (5, '{"instances": [true, false, 1, 0]}'),
        (6, '{"instances": [[1, 2, 3], [4, 5, 6]]}'),
        (7, '{"instances": [[[1, 2], [3, 4]]]}'),
        (8, '{"instances": [1e308, -1.5e-300, 0.1]}'),
        (9, '{"instances": [{"a": [1, 2], "b": 3}]}'),
        (9, '{"inputs": {"a": [[1, 2]], "b": [3]}}'),
        (0, '{"instances": [[[[[[1]]]]]]}'),
        (10, '{"instances": ["a", "caf\\u00e9", {"b64": "/wBh"}, ""]}'),
        (10, '{"inputs": ["\\ud83d\\ude00", "tab\\there"]}'),
        (11, '{"instances": [{"a": [1, 2], "key": ["k", {"b64": "AA=="}]}]}'),
        (11, '{"inputs": {"a": [[1, 2]], "key": [["x", "y"]]}}'),
    ]
    for i, (sig, body) in enumerate(bodies):
        write(root, "rest_predict", "seed_%02d" % i, bytes([sig]) + body.encode())

    # tensor_proto: a limits byte (see fuzz_tensor_proto.cpp), then a TensorProto.
    protos = [
        (1, tensor(DT_FLOAT, [2, 3], floats=[1, 2, 3, 4, 5, 6])),
        (1, tensor(DT_FLOAT, [2, 3], content=struct.pack("<6f", *range(6)))),
        (9, tensor(DT_FLOAT, [4, 3], floats=[1.5])),
        (2, tensor(DT_UINT8, [3], ints=[0, 255, 7])),
        (3, tensor(DT_INT64, [2, 2], int64s=[1 << 60, -1, 0, 5])),
        (4, tensor(DT_BOOL, [1, 2], bools=[1, 0])),
        (5, tensor(DT_HALF, [2], halves=[0x3C00, 0x7BFF])),
        (6, tensor(DT_INT8, [2, 1], ints=[-128, 127])),
        (7, tensor(DT_INT32, [2], ints=[2147483647, -2147483648])),
        (0, tensor(DT_FLOAT, [])),
        (16, tensor(DT_STRING, [3], strings=[b"a", b"\xff\x00", b""])),
        (24, tensor(DT_STRING, [64], strings=[b"broadcast"])),
        (0, tensor(DT_STRING, [2, 1], strings=[b"x", b"y"])),
        (16, tensor(DT_STRING, [2], content=b"\0" * 64)),
    ]
    for i, (limits, proto) in enumerate(protos):
        write(root, "tensor_proto", "seed_%02d" % i, bytes([limits]) + proto)

    # serving_config: a byte choosing the parser (modulo 4: BatchingParameters, ModelServerConfig,
    # SSLConfig, MonitoringConfig), then the text.
    configs = [
        (0, "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 1000 }\nmax_enqueued_batches { value: 16 }\n"
            "num_batch_threads { value: 4 }\nallowed_batch_sizes: 8\nallowed_batch_sizes: 32\npad_variable_length_inputs: true\n"),
        (0, "enable_large_batch_splitting { value: false }\nthread_pool_name { value: \"p\" }\n"),
        (1, 'model_config_list {\n  config {\n    name: "digits"\n    base_path: "/models/digits"\n    model_platform: "tensorflow"\n'
            '    model_version_policy { specific { versions: 1 versions: 2 } }\n    version_labels { key: "stable" value: 1 }\n  }\n}\n'),
        (1, 'model_config_list { config { name: "a" base_path: "/a" model_version_policy { latest { num_versions: 2 } } } '
            'config { name: "b" base_path: "/b" model_version_policy { all {} } } }\n'),
    ]
    pem = "-----BEGIN PRIVATE KEY-----\\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\\n-----END PRIVATE KEY-----\\n"
    cert = "-----BEGIN CERTIFICATE-----\\nMIIBszCCAVmgAwIBAgIBAjAKBggqhkjOPQQDAjAj\\n-----END CERTIFICATE-----\\n"
    configs += [
        (2, 'server_key: "%s"\nserver_cert: "%s"\n' % (pem, cert)),
        (2, 'server_key: "%s"\nserver_cert: "%s"\ncustom_ca: "%s"\nclient_verify: true\n' % (pem, cert, cert)),
    ]
    configs += [
        (3, 'prometheus_config {\n  enable: true\n  path: "/monitoring/prometheus/metrics"\n}\n'),
        (3, 'prometheus_config { enable: true }\n'),
        (3, 'prometheus_config { enable: false path: "/metrics" }\n'),
    ]
    for i, (kind, text) in enumerate(configs):
        write(root, "serving_config", "seed_%02d" % i, bytes([kind]) + text.encode())

    # warmup: TFRecord files of PredictionLogs for fuzz_warmup.cpp's signature (x f32[-1,2], k i64[-1]).
    x = tensor(DT_FLOAT, [1, 2], floats=[1, 2])
    k = tensor(DT_INT64, [1], int64s=[7])
    write(root, "warmup", "seed_00", tfrecords([predict_log("", [("x", x), ("k", k)])]))
    write(root, "warmup", "seed_01", tfrecords([predict_log("serving_default", [("k", k), ("x", x)]),
                                               predict_log("other", [("x", x)]), b"",
                                               predict_log("", [("x", tensor(DT_FLOAT, [3, 2], floats=[0.5])),
                                                                ("k", tensor(DT_INT64, [3], int64s=[1, 2, 3]))])]))
    write(root, "warmup", "seed_02", tfrecords([predict_log("", [("x", x)])]))

    # rest_inference: a byte (bit 0: Input proto, bits 1-2: signature; see fuzz_rest_inference.cpp),
    # then a REST body or a serialized tensorflow.serving.Input.
    inference_bodies = [
        (0, '{"examples": [{"x": [1.0, 2.5, -3.0, 4.0]}, {"x": [0.5, 0.5, 0.5, 0.5]}]}'),
        (2, '{"signature_name": "s", "context": {"k": 7}, "examples": [{"x": [1.5, 2.5]}, {"x": [3.5, 4.5], "k": -1}]}'),
        (4, '{"examples": [{"k": [127, -128]}, {"k": [true, false]}, {"k": [1, 2], "tag": "a", "b": {"b64": "YWJj"}}]}'),
        (6, '{"examples": [{"x": [0.5, 1.5, 2.5, 3.5]}]}'),
    ]
    for i, (choice, body) in enumerate(inference_bodies):
        write(root, "rest_inference", "seed_%02d" % i, bytes([choice]) + body.encode())

    def feature_entry(name, kind, payload):  # Features.feature map entry: Feature oneof kind
        return field(1, 2, field(1, 2, name.encode()) + field(2, 2, field(kind, 2, payload)))

    def floats_list(values):
        return field(1, 2, struct.pack("<%df" % len(values), *values))

    def int64_list(values):
        return field(1, 2, b"".join(varint(v) for v in values))

    def example(*entries):
        return field(1, 2, b"".join(entries))

    one = example(feature_entry("x", 2, floats_list([1, 2, 3, 4])), feature_entry("k", 3, int64_list([5])))
    two = example(feature_entry("x", 2, floats_list([0.5, -0.5, 8, 9])), feature_entry("tag", 1, field(1, 2, b"abc")))
    inputs = [
        (1, field(1, 2, field(1, 2, one) + field(1, 2, two))),                              # ExampleList
        (3, field(2, 2, field(1, 2, one) + field(2, 2, example(feature_entry("k", 3, int64_list([-1])))))),  # with context
        (5, field(1, 2, field(1, 2, example(feature_entry("k", 3, int64_list([1, 2])))))),
        (1, field(1, 2, b"")),                                                               # no examples
    ]
    for i, (choice, proto) in enumerate(inputs):
        write(root, "rest_inference", "seed_%02d" % (len(inference_bodies) + i), bytes([choice]) + proto)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus"))
