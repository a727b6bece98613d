#!/usr/bin/env python3
"""Builds a dozen Keras models of the layers `actorflow import keras` supports, with seeded random
weights, saves each as a .keras archive with a seeded input and Keras' own predictions for it, and
(with --actorflow) imports each one, runs it and compares: max relative error <= 1e-5 in f32.

Usage:
  scripts/check_keras_import.py --actorflow build/apps/actorflow [--keep DIR]
  scripts/check_keras_import.py --fixtures tests/data/keras_models   # what the C++ suite reads

Needs Keras 3 with a backend (pip install tensorflow-cpu, or keras + jax); exits 0 with a
"skipping" message when it cannot import keras: the fixtures are committed and the suite never
needs Python.
"""

import argparse
import os
import subprocess
import sys
import tempfile

SEED = 20261206
TOLERANCE = 1e-5


def models(keras, layers):
    """(name, model, input shapes and dtypes) for each case."""
    out = []

    def add(name, model):
        out.append((name, model))

    add("mlp", keras.Sequential([keras.Input((12,)), layers.Dense(16, activation="relu"), layers.Dropout(0.3),
                                 layers.Dense(5, activation="softmax")]))
    add("cnn", keras.Sequential([keras.Input((8, 8, 2)), layers.Conv2D(4, 3, padding="same", activation="relu"),
                                 layers.BatchNormalization(), layers.MaxPooling2D(), layers.Flatten(), layers.Dense(3)]))
    add("depthwise", keras.Sequential([keras.Input((9, 9, 3)), layers.DepthwiseConv2D(3, depth_multiplier=2, strides=2),
                                       layers.AveragePooling2D(2, padding="same"), layers.GlobalAveragePooling2D(),
                                       layers.Dense(4, activation="sigmoid")]))
    add("separable", keras.Sequential([keras.Input((7, 7, 2)), layers.SeparableConv2D(5, 3, dilation_rate=2),
                                       layers.Activation("tanh"), layers.Flatten(), layers.Dense(2, activation="gelu")]))
    add("lstm", keras.Sequential([keras.Input((6,), dtype="int32"), layers.Embedding(30, 8), layers.LSTM(7),
                                  layers.Dense(3)]))
    add("gru_sequences", keras.Sequential([keras.Input((5,), dtype="int32"), layers.Embedding(20, 6),
                                           layers.GRU(4, return_sequences=True), layers.Flatten(), layers.Dense(2)]))
    add("recurrent_stack", keras.Sequential([keras.Input((5, 3)), layers.GRU(6, reset_after=False, return_sequences=True),
                                             layers.LSTM(4, unit_forget_bias=False), layers.Dense(1)]))
    x = keras.Input((10,), name="features")
    a = layers.Dense(8, activation="relu")(x)
    b = layers.Dense(8)(x)
    s = layers.LayerNormalization()(layers.Add()([a, b]))
    add("residual", keras.Model(x, layers.Dense(3)(s)))
    img = keras.Input((6, 6, 1), name="image")
    c = layers.Conv2D(3, 3, activation="relu")(img)
    p = layers.Flatten()(layers.MaxPooling2D()(c))
    g = layers.Flatten()(c)
    add("concat_branches", keras.Model(img, layers.Dense(2)(layers.Concatenate()([p, g]))))
    r = keras.Input((16,), name="flat")
    h = layers.Reshape((4, 4, 1))(r)
    h = layers.Conv2D(2, 2, strides=2, padding="valid")(h)
    add("reshape_conv", keras.Model(r, layers.Dense(3)(layers.Flatten()(h))))
    m = keras.Input((4,), name="m")
    shared = layers.Dense(6, activation="tanh")(m)
    add("two_outputs", keras.Model(m, [layers.Dense(2, name="left")(shared), layers.Dense(1, activation="sigmoid", name="right")(shared)]))
    u = keras.Input((3,), name="u")
    v = keras.Input((5,), name="v")
    add("two_inputs", keras.Model([u, v], layers.Dense(2)(layers.Concatenate()([u, v]))))
    return out


def input_names(model):
    """The names actorflow gives the inputs: their InputLayers' names, as config.json has them."""
    config = model.get_config()
    if "input_layers" in config:
        refs = config["input_layers"]
        refs = [refs] if isinstance(refs[0], str) else refs
        return [r[0] for r in refs]
    return [config["layers"][0]["config"]["name"]]


def output_names(model):
    """The names actorflow gives the outputs: the layers that make them."""
    config = model.get_config()
    if "output_layers" in config:
        refs = config["output_layers"]
        refs = [refs] if isinstance(refs[0], str) else refs
        return [r[0] for r in refs]
    return [config["layers"][-1]["config"]["name"]]


def randomize(model, rng, np):
    for layer in model.layers:
        values = []
        for w in layer.weights:
            shape = tuple(w.shape)
            if "moving_variance" in w.path:
                values.append(rng.uniform(0.5, 1.5, shape).astype("float32"))
            else:
                values.append((rng.standard_normal(shape) * 0.4).astype("float32"))
        if values:
            layer.set_weights(values)


def inputs_for(model, rng, np):
    out = []
    for t in model.inputs:
        shape = (3,) + tuple(t.shape[1:])
        if "int" in str(t.dtype):
            out.append(rng.integers(0, 20, shape).astype("int32"))
        else:
            out.append(rng.standard_normal(shape).astype("float32"))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--actorflow", help="the actorflow program: import and compare")
    parser.add_argument("--fixtures", help="write the .keras files, inputs and Keras outputs here")
    parser.add_argument("--keep", help="work directory to keep (default: a temporary one)")
    args = parser.parse_args()
    try:
        import numpy as np
        import keras
        from keras import layers
    except ImportError as e:
        print(f"check_keras_import: skipping: {e} (pip install tensorflow-cpu, or keras and jax)")
        return 0
    keras.utils.set_random_seed(SEED)
    rng = np.random.default_rng(SEED)
    work = args.fixtures or args.keep or tempfile.mkdtemp(prefix="af_keras_import_")
    os.makedirs(work, exist_ok=True)
    worst_all = 0.0
    failures = 0
    for name, model in models(keras, layers):
        randomize(model, rng, np)
        xs = inputs_for(model, rng, np)
        ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
        ys = ys if isinstance(ys, list) else [ys]
        model.save(os.path.join(work, f"{name}.keras"))
        for i, x in enumerate(xs):
            np.save(os.path.join(work, f"{name}.input{i}.npy"), x)
        for i, y in enumerate(ys):
            np.save(os.path.join(work, f"{name}.output{i}.npy"), np.asarray(y, dtype="float32"))
        if not args.actorflow:
            print(f"{name}: written")
            continue
        out = os.path.join(work, f"{name}.saved_model")
        subprocess.run([args.actorflow, "import", "keras", os.path.join(work, f"{name}.keras"), out, "--overwrite"], check=True)
        feeds = ";".join(f"{n}={os.path.join(work, f'{name}.input{i}.npy')}" for i, n in enumerate(input_names(model)))
        outdir = os.path.join(work, f"{name}.ours")
        subprocess.run([args.actorflow, "saved_model", "run", "--dir", out, "--signature_def", "serving_default",
                        "--inputs", feeds, "--outdir", outdir, "--overwrite"], check=True, stdout=subprocess.DEVNULL)
        for i, y in enumerate(ys):
            ours = np.load(os.path.join(outdir, output_names(model)[i] + ".npy"))
            worst = float(np.max(np.abs(ours - y) / (1 + np.abs(y))))
            worst_all = max(worst_all, worst)
            ok = worst <= TOLERANCE
            failures += not ok
            print(f"{name} output {i}: max relative error {worst:.3g} {'ok' if ok else 'FAILED'}")
    if args.fixtures:  # a layer we lack: the import must name it
        keras.Sequential([keras.Input((8, 2)), layers.Conv1D(3, 3), layers.Flatten(), layers.Dense(1)]).save(
            os.path.join(work, "unsupported_conv1d.keras"))
    if args.actorflow:
        print(f'{{"models": {len(models(keras, layers))}, "max_relative_error": {worst_all:.3g}, "failures": {failures}}}')
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
