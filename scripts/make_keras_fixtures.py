#!/usr/bin/env python3
"""Writes Keras' own numbers for tests/ops/keras_reference_test.cpp into tests/data/keras/.

Usage: scripts/make_keras_fixtures.py [OUTPUT_DIR]   (default: tests/data/keras)

For LSTM, GRU, BatchNormalization, Conv2D, DepthwiseConv2D and SeparableConv2D, each case builds
the Keras layer (pip's TensorFlow + Keras), sets every weight to seeded random values (so biases and
moving statistics are not their trivial starting values), calls it on a seeded random input and
records, in Keras' layouts:
  - the layer's options, the input, every weight (layer.weights order) and the output;
  - the gradients of sum(output * probe) for the input and each trainable weight, where probe[i] =
    sin(0.37 i + 0.2) + 0.5 over the flattened output (the probe of tests/ops/layer_test_support.hpp);
  - for BatchNormalization in training mode, the moving mean and variance after the call.

The format is plain text, so the C++ test needs no parser library and a diff shows what changed:
  # comment
  layer <Keras class name>
  option <name> <value>...
  tensor <name> <dim>...          (no dims: a scalar)
  <the values, row-major, each as %.9g: exact for float32>

Exits 0 with a "skipping" message when tensorflow is not importable: the fixtures are committed,
and the C++ suite never needs TensorFlow.
"""

import math
import os
import sys

SEED = 20240611

# The get_config() entries each fixture records, so the C++ test builds the layer Keras built.
OPTIONS = {
    "Conv2D": ["filters", "kernel_size", "strides", "padding", "dilation_rate", "data_format", "activation",
               "use_bias"],
    "DepthwiseConv2D": ["kernel_size", "depth_multiplier", "strides", "padding", "dilation_rate", "data_format",
                        "activation", "use_bias"],
    "SeparableConv2D": ["filters", "kernel_size", "depth_multiplier", "strides", "padding", "dilation_rate",
                        "data_format", "activation", "use_bias"],
    "BatchNormalization": ["axis", "momentum", "epsilon", "center", "scale"],
    "LSTM": ["units", "activation", "recurrent_activation", "use_bias", "unit_forget_bias", "return_sequences",
             "go_backwards", "stateful"],
    "GRU": ["units", "activation", "recurrent_activation", "use_bias", "reset_after", "return_sequences",
            "go_backwards", "stateful"],
}


def fmt_values(values):
    return " ".join("%.9g" % float(v) for v in values)


class fixture_writer:
    """Collects one case's lines in the format above."""

    def __init__(self, layer_kind, header):
        self.lines = [f"# {line}" for line in header] + [f"layer {layer_kind}"]

    def option(self, name, *values):
        self.lines.append("option " + name + "".join(f" {v}" for v in values))

    def tensor(self, name, array):
        import numpy as np
        a = np.asarray(array, dtype=np.float32)
        self.lines.append("tensor " + name + "".join(f" {d}" for d in a.shape))
        self.lines.append(fmt_values(a.reshape(-1)))

    def save(self, path):
        with open(path, "w") as f:
            f.write("\n".join(self.lines) + "\n")


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "keras")
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import numpy as np  # noqa: PLC0415
        import tensorflow as tf  # noqa: PLC0415 (optional dependency)
        import keras  # noqa: PLC0415
    except ImportError:
        print("skipping: tensorflow not installed (pip install tensorflow-cpu to make the Keras fixtures)")
        return 0
    os.makedirs(out_dir, exist_ok=True)
    keras.utils.set_random_seed(SEED)
    header = [f"Keras reference written by scripts/make_keras_fixtures.py: tensorflow {tf.__version__}, "
              f"keras {keras.__version__}, numpy seed {SEED}"]

    def probe(n):
        return np.array([math.sin(0.37 * i + 0.2) + 0.5 for i in range(n)], dtype=np.float32)

    def option_values(value):
        if isinstance(value, (list, tuple)):
            return [option_values(v)[0] for v in value]
        if isinstance(value, bool):
            return [int(value)]
        return [value]

    def record(name, layer, x, training=None, weight_scales=None, positive=()):
        """Builds `layer` on x, draws its weights, runs it once and writes `name`.txt."""
        rng = np.random.default_rng(SEED + 1 + len(written))  # a stream per case, in case order
        x = tf.constant(x, dtype=tf.float32)
        layer.build(x.shape)
        values = []
        for w in layer.weights:
            short = w.path.split("/")[-1]
            if short in positive:  # variances
                v = rng.uniform(0.5, 2.0, size=tuple(w.shape))
            else:
                scale = (weight_scales or {}).get(short, 0.5)
                v = rng.uniform(-scale, scale, size=tuple(w.shape))
            values.append(v.astype(np.float32))
        layer.set_weights(values)
        kind = type(layer).__name__
        fw = fixture_writer(kind, header + [f"case {name}"])
        config = layer.get_config()  # the options as Keras holds them, defaults included
        for key in OPTIONS[kind]:
            fw.option(key, *option_values(config[key]))
        if training is not None:
            fw.option("training", int(training))
        fw.tensor("input", x.numpy())
        for w, v in zip(layer.weights, values):
            fw.tensor("weight:" + w.path.split("/")[-1], v)
        trainable = list(layer.trainable_weights)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=bool(training))
            probed = tf.reduce_sum(tf.reshape(y, [-1]) * probe(int(tf.size(y))))
        grads = tape.gradient(probed, [x] + trainable)
        fw.tensor("output", y.numpy())
        fw.tensor("grad:input", grads[0].numpy())
        for w, g in zip(trainable, grads[1:]):
            fw.tensor("grad:" + w.path.split("/")[-1], g.numpy())
        if training:
            for w in layer.non_trainable_weights:  # the moving statistics after one training step
                fw.tensor("after:" + w.path.split("/")[-1], w.numpy())
        path = os.path.join(out_dir, name + ".txt")
        fw.save(path)
        written.append(path)

    written = []
    rng = np.random.default_rng(SEED)
    images = rng.uniform(-1, 1, size=(2, 5, 5, 3)).astype(np.float32)
    even_images = rng.uniform(-1, 1, size=(2, 6, 6, 2)).astype(np.float32)
    sequences = rng.uniform(-1, 1, size=(2, 5, 4)).astype(np.float32)
    # Batch-norm inputs off-centre and wider than 1, so that the mean and variance matter.
    bn_images = (rng.normal(0.7, 1.5, size=(2, 4, 4, 3))).astype(np.float32)
    bn_rows = (rng.normal(-0.4, 2.0, size=(6, 5))).astype(np.float32)

    L = keras.layers
    # -- convolutions: valid and same (odd inputs with stride 2 pad more after than before),
    # dilations, depth multipliers, activations.
    for name, layer, x in (
        ("conv2d_valid", L.Conv2D(4, (3, 3)), images),
        ("conv2d_same_stride2_relu", L.Conv2D(5, (3, 2), strides=(2, 2), padding="same", activation="relu"), images),
        ("conv2d_same_dilation2_nobias", L.Conv2D(3, (3, 3), padding="same", dilation_rate=(2, 2), use_bias=False),
         even_images),
        ("depthwise_same_stride2_multiplier2",
         L.DepthwiseConv2D((3, 3), strides=(2, 2), padding="same", depth_multiplier=2), images),
        ("depthwise_valid_dilation2_tanh", L.DepthwiseConv2D((2, 3), dilation_rate=(2, 1), activation="tanh"),
         even_images),
        ("separable_same_multiplier2", L.SeparableConv2D(4, (3, 3), padding="same", depth_multiplier=2), images),
        ("separable_valid_stride2", L.SeparableConv2D(3, (3, 3), strides=(2, 2)), even_images),
    ):
        record(name, layer, x)

    # -- batch normalization: training (batch statistics, moving statistics updated) and inference
    # (moving statistics), over images (axes N, H, W) and rows (axis N).
    for name, layer, x, training in (
        ("batchnorm_images_training", L.BatchNormalization(momentum=0.9), bn_images, True),
        ("batchnorm_images_inference", L.BatchNormalization(momentum=0.9), bn_images, False),
        ("batchnorm_rows_training_eps", L.BatchNormalization(momentum=0.8, epsilon=1e-2), bn_rows, True),
        ("batchnorm_rows_training_noscale", L.BatchNormalization(scale=False, center=False), bn_rows, True),
    ):
        record(name, layer, x, training=training, positive=("moving_variance",),
               weight_scales={"moving_mean": 1.0, "gamma": 1.5, "beta": 1.0})

    # -- recurrent layers: the last step and whole sequences; GRU in both reset_after variants.
    for name, layer in (
        ("lstm_last", L.LSTM(3)),
        ("lstm_sequences", L.LSTM(3, return_sequences=True)),
        ("lstm_nobias_sequences", L.LSTM(2, use_bias=False, return_sequences=True)),
        ("gru_last", L.GRU(3)),
        ("gru_sequences", L.GRU(3, return_sequences=True)),
        ("gru_reset_before_sequences", L.GRU(3, reset_after=False, return_sequences=True)),
    ):
        record(name, layer, sequences, weight_scales={"kernel": 0.8, "recurrent_kernel": 0.8})

    total = sum(os.path.getsize(p) for p in written)
    print(f"wrote {len(written)} fixtures ({total} bytes) to {out_dir} "
          f"(tensorflow {tf.__version__}, keras {keras.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
