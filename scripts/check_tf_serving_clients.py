#!/usr/bin/env python3
"""Checks a running `actorflow serve` with TensorFlow Serving's own clients, unchanged.

gRPC goes through tensorflow-serving-api's generated stubs (PredictionServiceStub,
ModelServiceStub) with tf.make_tensor_proto / tf.make_ndarray, exactly as a TF Serving client
does; REST goes through `requests` with TF Serving's JSON. Both answers must agree.

    actorflow serve --model_name=dense --model_base_path=/models/dense --port=-1 --rest_api_port=-1
    # serving: ready rest=P grpc=Q
    python3 scripts/check_tf_serving_clients.py --model=dense --rest_port=P --grpc_port=Q

Checks: GetModelStatus and GET /v1/models/M list the same available versions; GetModelMetadata's
"signature_def" Any unpacks into a SignatureDefMap whose signature matches GET .../metadata;
Predict and POST ...:predict give the same outputs for the same inputs; an unknown model is
NOT_FOUND / 404. DT_STRING inputs are sent as bytes that are not all UTF-8 (string_val over gRPC,
{"b64": ...} over REST); a DT_STRING output named like an input (or like it plus "_bytes") must
return that input byte for byte over both. For every signature whose method_name is classify or regress: Classify/Regress
over gRPC (tf.train.Example inputs), POST ...:classify/:regress and Predict on the same rows agree,
and MultiInference over all of them gives each one's results. Prints "SKIP: ..." and exits 0 when the Python packages are missing; exits 1 on a
failed check.
"""

import argparse
import base64
import sys


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(0)


try:
    import numpy as np
    import requests
    import grpc
except ImportError as e:
    skip(f"{e.name} is not installed (pip install requests grpcio numpy tensorflow-serving-api)")
try:
    import tensorflow as tf
    from tensorflow_serving.apis import classification_pb2
    from tensorflow_serving.apis import get_model_metadata_pb2
    from tensorflow_serving.apis import get_model_status_pb2
    from tensorflow_serving.apis import model_service_pb2_grpc
    from tensorflow_serving.apis import inference_pb2
    from tensorflow_serving.apis import predict_pb2
    from tensorflow_serving.apis import prediction_service_pb2_grpc
    from tensorflow_serving.apis import regression_pb2
except ImportError as e:
    skip(f"{e.name} is not installed (pip install tensorflow-serving-api)")


class CheckFailed(Exception):
    pass


def check(condition, what):
    if not condition:
        raise CheckFailed(what)
    print(f"ok: {what}")


def example_inputs(signature, rows, seed=0):
    """Deterministic inputs for every input of a SignatureDef: open dimensions become `rows`."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, info in sorted(signature.inputs.items()):
        dims = [d.size if d.size >= 0 else rows for d in info.tensor_shape.dim]
        dtype = tf.dtypes.as_dtype(info.dtype)
        if dtype == tf.string:
            count = int(np.prod(dims)) if dims else 1
            keys = [b"%s-%d-\xff\x00\xc3\xa9" % (name.encode(), i) for i in range(count)]  # not UTF-8, a NUL, an é
            value = np.array(keys, dtype=object).reshape(dims)
        elif dtype.is_bool:
            value = rng.integers(0, 2, size=dims).astype(bool)
        elif dtype.is_integer:
            value = rng.integers(0, 5, size=dims).astype(dtype.as_numpy_dtype)
        else:
            value = rng.uniform(-1.0, 1.0, size=dims).astype(dtype.as_numpy_dtype)
        inputs[name] = value
    return inputs


def grpc_checks(args, channel):
    """Status, metadata and a prediction through the stubs; returns (signature, inputs, outputs)."""
    models = model_service_pb2_grpc.ModelServiceStub(channel)
    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = args.model
    status = models.GetModelStatus(status_request, timeout=args.timeout)
    available = sorted(
        v.version for v in status.model_version_status
        if v.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE)
    check(len(available) > 0, f"gRPC GetModelStatus: model '{args.model}' has available versions {available}")

    predictions = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    metadata_request = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata_request.model_spec.name = args.model
    metadata_request.metadata_field.append("signature_def")
    metadata = predictions.GetModelMetadata(metadata_request, timeout=args.timeout)
    defs = get_model_metadata_pb2.SignatureDefMap()
    check(metadata.metadata["signature_def"].Unpack(defs),
          "gRPC GetModelMetadata: 'signature_def' unpacks into a tensorflow.serving.SignatureDefMap")
    check(args.signature in defs.signature_def,
          f"gRPC GetModelMetadata: signature '{args.signature}' among {sorted(defs.signature_def)}")
    signature = defs.signature_def[args.signature]

    inputs = example_inputs(signature, args.rows)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = args.model
    request.model_spec.signature_name = args.signature
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    response = predictions.Predict(request, timeout=args.timeout)
    outputs = {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}
    check(sorted(outputs) == sorted(signature.outputs),
          f"gRPC Predict: outputs {sorted(outputs)} are the signature's")
    check(response.model_spec.name == args.model and response.model_spec.version.value == available[-1],
          f"gRPC Predict: model_spec names '{args.model}' version {response.model_spec.version.value}")
    for name, value in outputs.items():
        check(value.shape[:1] == (args.rows,), f"gRPC Predict: output '{name}' has {args.rows} rows ({value.shape})")
    for name, value in outputs.items():
        if response.outputs[name].dtype != tf.string.as_datatype_enum:
            continue
        source = passed_through(name, inputs)
        if source is not None:
            check(value.tolist() == inputs[source].tolist(),
                  f"gRPC Predict: DT_STRING output '{name}' returns input '{source}' byte for byte")

    unknown = predict_pb2.PredictRequest()
    unknown.CopyFrom(request)
    unknown.model_spec.name = args.model + "_absent"
    try:
        predictions.Predict(unknown, timeout=args.timeout)
        check(False, "gRPC Predict for an unknown model fails")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, f"gRPC Predict for an unknown model is NOT_FOUND ({e.code()})")
    return available, signature, inputs, outputs, defs


def passed_through(output, inputs):
    """The input a DT_STRING output echoes by name ("key" or "key_bytes" for input "key"), or None."""
    for name in (output, output[:-len("_bytes")] if output.endswith("_bytes") else None):
        if name in inputs and inputs[name].dtype == object:
            return name
    return None


def rest_value(value):
    """An input as TF Serving's REST API takes it: bytes as {"b64": ...}, numbers as they are."""
    if value.dtype == object:
        return np.vectorize(lambda b: {"b64": base64.b64encode(b).decode()}, otypes=[object])(value).tolist()
    return value.tolist()


def rest_strings(value):
    """A REST DT_STRING value back as nested lists of bytes: text as UTF-8, {"b64": ...} decoded."""
    if isinstance(value, list):
        return [rest_strings(v) for v in value]
    if isinstance(value, dict):
        return base64.b64decode(value["b64"])
    return value.encode()


CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"


def as_examples(inputs, rows):
    """One tf.train.Example per row: each input a float or int64 feature of that row's values."""
    examples = []
    for r in range(rows):
        features = {}
        for name, value in inputs.items():
            flat = np.asarray(value[r]).reshape(-1)
            if np.issubdtype(flat.dtype, np.floating):
                features[name] = tf.train.Feature(float_list=tf.train.FloatList(value=flat.tolist()))
            else:
                features[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=flat.astype(np.int64).tolist()))
        examples.append(tf.train.Example(features=tf.train.Features(feature=features)))
    return examples


def inference_checks(args, channel, defs):
    """Classify, Regress (gRPC and REST) and MultiInference against Predict on the same rows."""
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    base = f"http://{args.host}:{args.rest_port}/v1/models/{args.model}"
    tasks = sorted((name, d.method_name) for name, d in defs.signature_def.items() if d.method_name in (CLASSIFY, REGRESS))
    if not tasks:
        print("no classify or regress signatures: Classify, Regress and MultiInference not checked")
        return
    expected = {}
    first_inputs = None
    for name, method in tasks:
        signature = defs.signature_def[name]
        inputs = example_inputs(signature, args.rows, seed=1)
        if first_inputs is None:
            first_inputs = inputs
        examples = as_examples(inputs, args.rows)
        predict = predict_pb2.PredictRequest()
        predict.model_spec.name = args.model
        predict.model_spec.signature_name = name
        for key, value in inputs.items():
            predict.inputs[key].CopyFrom(tf.make_tensor_proto(value))
        predicted = {k: tf.make_ndarray(v) for k, v in stub.Predict(predict, timeout=args.timeout).outputs.items()}
        rest_body = {"signature_name": name,
                     "examples": [{k: np.asarray(v[r]).reshape(-1).tolist() for k, v in inputs.items()} for r in range(args.rows)]}
        if method == CLASSIFY:
            request = classification_pb2.ClassificationRequest()
            request.model_spec.name = args.model
            request.model_spec.signature_name = name
            request.input.example_list.examples.extend(examples)
            result = stub.Classify(request, timeout=args.timeout).result
            scores = np.array([[c.score for c in row.classes] for row in result.classifications])
            check(np.allclose(scores, predicted["scores"], rtol=1e-5, atol=1e-6),
                  f"gRPC Classify '{name}': the scores Predict gives for the same rows")
            if args.rest_port:
                answer = requests.post(base + ":classify", json=rest_body, timeout=args.timeout)
                check(answer.status_code == 200, f"REST :classify '{name}': 200 ({answer.status_code}: {answer.text[:200]})")
                rest_scores = np.array([[pair[1] for pair in row] for row in answer.json()["results"]])
                check(np.allclose(rest_scores, scores, rtol=1e-5, atol=1e-6), f"REST and gRPC Classify agree on '{name}'")
            expected[name] = scores
        else:
            request = regression_pb2.RegressionRequest()
            request.model_spec.name = args.model
            request.model_spec.signature_name = name
            request.input.example_list.examples.extend(examples)
            result = stub.Regress(request, timeout=args.timeout).result
            values = np.array([r.value for r in result.regressions])
            check(np.allclose(values, predicted["outputs"].reshape(-1), rtol=1e-5, atol=1e-6),
                  f"gRPC Regress '{name}': the outputs Predict gives for the same rows")
            if args.rest_port:
                answer = requests.post(base + ":regress", json=rest_body, timeout=args.timeout)
                check(answer.status_code == 200, f"REST :regress '{name}': 200 ({answer.status_code}: {answer.text[:200]})")
                check(np.allclose(np.array(answer.json()["results"]), values, rtol=1e-5, atol=1e-6),
                      f"REST and gRPC Regress agree on '{name}'")
            expected[name] = values

    # MultiInference: every such signature that takes the same inputs as the first, on one Input.
    same = [(n, m) for n, m in tasks if sorted(defs.signature_def[n].inputs) == sorted(first_inputs)]
    multi = inference_pb2.MultiInferenceRequest()
    for name, method in same:
        task = multi.tasks.add()
        task.model_spec.name = args.model
        task.model_spec.signature_name = name
        task.method_name = method
    multi.input.example_list.examples.extend(as_examples(first_inputs, args.rows))
    results = stub.MultiInference(multi, timeout=args.timeout).results
    check(len(results) == len(same), f"gRPC MultiInference: one result per task ({len(results)} of {len(same)})")
    for (name, method), result in zip(same, results):
        check(result.model_spec.signature_name == name, f"gRPC MultiInference: result for '{name}' in the tasks' order")
        if method == CLASSIFY:
            got = np.array([[c.score for c in row.classes] for row in result.classification_result.classifications])
        else:
            got = np.array([r.value for r in result.regression_result.regressions])
        # Same input names and seed: the rows are the ones '{name}' was called alone with.
        check(np.allclose(got, expected[name], rtol=1e-5, atol=1e-6), f"gRPC MultiInference: '{name}' as called alone")


def rest_checks(args, available, signature, inputs, grpc_outputs):
    base = f"http://{args.host}:{args.rest_port}/v1/models/{args.model}"
    status = requests.get(base, timeout=args.timeout)
    check(status.status_code == 200, f"REST GET {base}: 200 ({status.status_code})")
    rest_available = sorted(
        int(v["version"]) for v in status.json()["model_version_status"] if v["state"] == "AVAILABLE")
    check(rest_available == available, f"REST and gRPC status agree on versions {rest_available}")

    metadata = requests.get(base + "/metadata", timeout=args.timeout)
    check(metadata.status_code == 200, f"REST GET {base}/metadata: 200 ({metadata.status_code})")
    rest_def = metadata.json()["metadata"]["signature_def"]["signature_def"][args.signature]
    check(sorted(rest_def["inputs"]) == sorted(signature.inputs) and sorted(rest_def["outputs"]) == sorted(signature.outputs),
          "REST and gRPC metadata agree on the signature's inputs and outputs")

    body = {"signature_name": args.signature, "inputs": {name: rest_value(value) for name, value in inputs.items()}}
    answer = requests.post(base + ":predict", json=body, timeout=args.timeout)
    check(answer.status_code == 200, f"REST POST {base}:predict: 200 ({answer.status_code}: {answer.text[:200]})")
    rest_outputs = answer.json()["outputs"]
    if not isinstance(rest_outputs, dict):  # a single output comes without its name
        rest_outputs = {next(iter(grpc_outputs)): rest_outputs}
    for name, value in grpc_outputs.items():
        if value.dtype == object:
            check(rest_strings(rest_outputs[name]) == value.tolist(), f"REST and gRPC predictions agree on DT_STRING output '{name}'")
            if name.endswith("_bytes"):
                check(all(isinstance(v, dict) for v in rest_outputs[name]), f"REST writes '{name}' as {{\"b64\": ...}}")
            continue
        check(np.allclose(np.asarray(rest_outputs[name], dtype=np.float64), value.astype(np.float64), rtol=1e-4, atol=1e-5),
              f"REST and gRPC predictions agree on output '{name}'")

    absent = requests.post(f"http://{args.host}:{args.rest_port}/v1/models/{args.model}_absent:predict", json=body,
                           timeout=args.timeout)
    check(absent.status_code == 404, f"REST predict for an unknown model is 404 ({absent.status_code})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--grpc_port", type=int, required=True)
    parser.add_argument("--rest_port", type=int, default=0, help="0: skip the REST checks")
    parser.add_argument("--model", required=True)
    parser.add_argument("--signature", default="serving_default")
    parser.add_argument("--rows", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    args = parser.parse_args()

    options = [("grpc.max_receive_message_length", 1 << 30), ("grpc.max_send_message_length", 1 << 30)]
    try:
        with grpc.insecure_channel(f"{args.host}:{args.grpc_port}", options=options) as channel:
            available, signature, inputs, outputs, defs = grpc_checks(args, channel)
            if args.rest_port:
                rest_checks(args, available, signature, inputs, outputs)
            inference_checks(args, channel, defs)
    except CheckFailed as e:
        print(f"FAILED: {e}")
        return 1
    except grpc.RpcError as e:
        print(f"FAILED: gRPC call: {e.code()}: {e.details()}")
        return 1
    except requests.RequestException as e:
        print(f"FAILED: REST call: {e}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
