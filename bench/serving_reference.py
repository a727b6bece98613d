"""The Ray Serve peer of the serving benchmark: an MLP behind Ray Serve's HTTP proxy.

The model is 784-512-512-10 with ReLU between layers and logits out (no softmax): random weights
from a fixed seed, or with --weights DIR the layers saved as DIR/<layer>/kernel.npy ([in, out])
and DIR/<layer>/bias.npy ([out]), layers in natural name order (dense, dense_1, dense_2, ...).
Requests and answers are TensorFlow-Serving JSON: {"instances": [[784 floats], ...]} in,
{"predictions": [[10 floats], ...]} out. Requests are batched by @serve.batch (at most 32 requests,
waiting at most 2 ms for a batch to fill).

  python3 bench/serving_reference.py --serve [--port 8000] [--weights DIR]
      starts the server and prints "READY <port>" once it answers; runs until interrupted.
  python3 bench/serving_reference.py --measure build/bench/bench_loadgen [--quick]
      starts the server, measures it with bench_loadgen (closed-loop saturation, then open loop at
      50% of it) and prints one JSON object on its last line.

Without Ray Serve or PyTorch installed it says so and exits 0.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SCRIPT = "serving_reference.py"
HOST = "127.0.0.1"
MAX_BATCH_SIZE = 32
BATCH_WAIT_TIMEOUT_S = 0.002
LAYER_WIDTHS = (784, 512, 512, 10)


def load_layers(weights_dir):
    """[(kernel [in, out], bias [out])] from DIR/<layer>/{kernel,bias}.npy, in natural layer order."""
    import numpy as np

    def natural_key(name):
        return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]

    layer_dirs = sorted(
        (os.path.relpath(root, weights_dir) for root, _, files in os.walk(weights_dir) if "kernel.npy" in files),
        key=natural_key,
    )
    if not layer_dirs:
        sys.exit(f"{SCRIPT}: no <layer>/kernel.npy under {weights_dir}")
    layers = []
    for layer in layer_dirs:
        kernel = np.load(os.path.join(weights_dir, layer, "kernel.npy")).astype(np.float32)
        bias = np.load(os.path.join(weights_dir, layer, "bias.npy")).astype(np.float32)
        if kernel.ndim != 2 or bias.shape != (kernel.shape[1],):
            sys.exit(f"{SCRIPT}: {layer}: kernel {kernel.shape} and bias {bias.shape} do not make a dense layer")
        if layers and layers[-1][0].shape[1] != kernel.shape[0]:
            sys.exit(f"{SCRIPT}: {layer}: takes {kernel.shape[0]} inputs, the layer before gives {layers[-1][0].shape[1]}")
        layers.append((kernel, bias))
    return layers


def build_app(layers):
    """The Serve application: one replica of the batched MLP (importing Ray and PyTorch here)."""
    import numpy as np
    import torch
    from ray import serve
    from starlette.requests import Request

    # Per-request access logs are I/O on the request path; a benchmark peer does without them.
    quiet_logs = {"enable_access_log": False, "log_level": "WARNING"}

    @serve.deployment(
        num_replicas=1,
        ray_actor_options={"num_cpus": 1},
        # Serve's default (5) would cap a batch at 5 requests; let up to two full batches queue.
        max_ongoing_requests=2 * MAX_BATCH_SIZE,
        logging_config=quiet_logs,
    )
    class MlpServer:
        def __init__(self, layers):
            # Two cores: one for this replica's matmuls, the other for the HTTP proxy and the
            # load generator. More threads would only contend.
            torch.set_num_threads(1)
            modules = []
            if layers is None:
                torch.manual_seed(0)
                for i, (n_in, n_out) in enumerate(zip(LAYER_WIDTHS, LAYER_WIDTHS[1:])):
                    modules.append(torch.nn.Linear(n_in, n_out))
                    if i + 2 < len(LAYER_WIDTHS):
                        modules.append(torch.nn.ReLU())
            else:
                for i, (kernel, bias) in enumerate(layers):
                    linear = torch.nn.Linear(*kernel.shape)
                    with torch.no_grad():
                        linear.weight.copy_(torch.from_numpy(kernel.T))
                        linear.bias.copy_(torch.from_numpy(bias))
                    modules.append(linear)
                    if i + 1 < len(layers):
                        modules.append(torch.nn.ReLU())
            self.model = torch.nn.Sequential(*modules).eval()
            self.inputs = self.model[0].in_features

        @serve.batch(max_batch_size=MAX_BATCH_SIZE, batch_wait_timeout_s=BATCH_WAIT_TIMEOUT_S)
        async def predict(self, requests):
            """One forward pass for the rows of every request in the batch; each gets its own rows back."""
            rows = np.concatenate(requests)
            with torch.inference_mode():
                logits = self.model(torch.from_numpy(rows)).numpy()
            answers, start = [], 0
            for instances in requests:
                answers.append(logits[start:start + len(instances)].tolist())
                start += len(instances)
            return answers

        async def __call__(self, request: Request):
            payload = await request.json()
            instances = np.asarray(payload["instances"], dtype=np.float32)
            if instances.ndim != 2 or instances.shape[1] != self.inputs:
                from starlette.responses import JSONResponse

                return JSONResponse({"error": f"instances must be [n, {self.inputs}]"}, status_code=400)
            return {"predictions": await self.predict(instances)}

    return MlpServer.bind(layers)


def example_body(seed=0):
    """A TensorFlow-Serving request with one instance of 784 values in [0, 1)."""
    import random

    rng = random.Random(seed)
    return json.dumps({"instances": [[round(rng.random(), 4) for _ in range(LAYER_WIDTHS[0])]]})


def wait_until_answering(port, timeout_s=180):
    """Posts the example request until it gets ten logits back."""
    body = example_body().encode()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(f"http://{HOST}:{port}/", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as response:
                if len(json.loads(response.read())["predictions"][0]) == LAYER_WIDTHS[-1]:
                    return True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    return False


def start_server(port, weights_dir):
    """Starts Ray and the Serve application on HOST:port; returns once it answers."""
    import logging

    import ray
    from ray import serve

    layers = load_layers(weights_dir) if weights_dir else None
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    serve.start(http_options={"host": HOST, "port": port}, logging_config={"enable_access_log": False, "log_level": "WARNING"})
    serve.run(build_app(layers), name="mlp", route_prefix="/")
    if not wait_until_answering(port):
        sys.exit(f"{SCRIPT}: the server on {HOST}:{port} did not answer")


def stop_server():
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def missing_dependencies():
    """A sentence naming what is not installed, or None."""
    missing = []
    for module, package in (("ray.serve", "ray[serve]"), ("torch", "torch"), ("numpy", "numpy")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if not missing:
        return None
    return f"{', '.join(missing)} not installed (pip install 'ray[serve]' torch)"


def measure(args):
    with tempfile.TemporaryDirectory() as scratch:
        body_file = os.path.join(scratch, "body.json")
        with open(body_file, "w") as f:
            f.write(example_body())
        start_server(args.port, args.weights)
        try:
            command = [
                args.measure, "--host", HOST, "--port", str(args.port), "--path", "/", "--body-file", body_file,
                "--connections", str(args.connections),
                "--duration-ms", str(3000 if args.quick else args.duration_ms),
                "--warmup-ms", str(500 if args.quick else 2000),
            ]
            print("running:", " ".join(command), file=sys.stderr)
            run = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
        finally:
            stop_server()
    import ray
    import torch

    result = json.loads(run.stdout.strip().splitlines()[-1])
    result.update({
        "framework": "ray_serve",
        "ray_version": ray.__version__,
        "torch_version": torch.__version__,
        "model": "mlp " + "-".join(map(str, LAYER_WIDTHS)) if not args.weights else f"mlp from {args.weights}",
        "max_batch_size": MAX_BATCH_SIZE,
        "batch_wait_timeout_s": BATCH_WAIT_TIMEOUT_S,
        "quick": args.quick,
    })
    print(json.dumps(result))


def serve_forever(args):
    # Whoever started us may stop us with SIGTERM: leave through `finally`, so Ray shuts down too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    start_server(args.port, args.weights)
    print(f"READY {args.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop_server()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--serve", action="store_true", help="start the server and keep it running")
    mode.add_argument("--measure", metavar="BENCH_LOADGEN", help="start the server and measure it with this program")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--weights", metavar="DIR", help="load <layer>/kernel.npy and <layer>/bias.npy from DIR")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration-ms", type=int, default=10000)
    parser.add_argument("--quick", action="store_true", help="short measurement")
    args = parser.parse_args()

    missing = missing_dependencies()
    if missing:
        print(f"{SCRIPT}: {missing}; skipping")
        if args.measure:
            print(json.dumps({"framework": "ray_serve", "skipped": True, "reason": missing}))
        return
    if args.measure:
        measure(args)
    else:
        serve_forever(args)


if __name__ == "__main__":
    main()
