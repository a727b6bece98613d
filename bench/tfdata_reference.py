#!/usr/bin/env python3
"""tf.data reference for bench/bench_pipeline.cpp: the same input pipeline, in TensorFlow.

bench_pipeline writes TFRecord files of tf.train.Example records (feature "image": one bytes value
of 32*32*3 uint8, "label": one int64) and times, in actorflow,

  list_files -> interleave(TFRecordDataset(f).map(parse).map(decode), cycle_length=T, block_length=16)
  -> shuffle(10000, seed 7) -> batch(256) -> prefetch(4)

(decode: float32 / 255, random left-right flip). Three layouts of that work are timed here:

  maps_inside  the maps inside the interleave, as above (per element, deterministic order);
  maps_after   interleave(TFRecordDataset) -> map(parse, T) -> map(decode, T) (per element);
  expert       what a tf.data expert writes for it (the tf.data performance guide's advice):
               interleave(TFRecordDataset, AUTOTUNE) -> shuffle(10000) of the serialized records
               -> batch(256) -> one vectorised map over the batch (tf.io.parse_example,
               tf.io.decode_raw, cast, a random flip per image of the batch; AUTOTUNE)
               -> prefetch(AUTOTUNE), deterministic=False everywhere. The same records, decoded
               images and batches; it shuffles 3 KiB records instead of 12 KiB decoded images.

elements_per_s is the fastest layout; each layout's figure is on the JSON line too.

This script times that pipeline in tf.data on the same files, so the two elements/s figures can be
compared on one machine and thread count:

  build/bench/bench_pipeline --quick --threads 2 --dir /tmp/tfref_data   # writes and keeps the files
  python bench/tfdata_reference.py --quick --threads 2 --dir /tmp/tfref_data
  python bench/tfdata_reference.py --quick --threads 2 --dir /tmp/tfref_data --autotune
  python bench/tfdata_reference.py --quick --threads 2 --dir /tmp/tfref_data --layouts expert

Without the C++ binary, `--make-files` writes the files first, byte-identical to bench_pipeline's
(50000 records in 8 files from the same mt19937(1) stream; --records/--files as in bench_pipeline).

tf.data at its strongest: inter-/intra-op pools and a private thread pool of T threads, default
graph optimizations (map fusion etc.), a parallel interleave (actorflow's reads its files
concurrently too). The per-element layouts keep a deterministic order, as bench_pipeline does
(deterministic=True on the maps and in the options); --autotune uses tf.data.AUTOTUNE for their
num_parallel_calls and prefetch instead of T and 4. The expert layout always uses AUTOTUNE and
deterministic=False. After a warm-up pass, full passes are timed two ways, alternating: iterating
in Python (`for batch in ds`) and in-graph with `ds.reduce`; a layout's figure is its faster loop's
median, and elements_per_s the fastest layout's; cpu_us_per_element is the CPU time of the whole
process (every thread) per element in the same passes. The last line printed is a JSON object.
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time

SIDE, CHANNELS, SHUFFLE, BATCH = 32, 3, 10000, 256


def make_files(tf, directory, records, files):
    """Writes `records` Examples round-robin into `files` files, as bench_pipeline does."""
    import numpy as np
    os.makedirs(directory, exist_ok=True)
    # RandomState(int) seeds MT19937 like std::mt19937{1}; random_raw gives its 32-bit outputs.
    rng = np.random.RandomState(1)._bit_generator
    writers = [tf.io.TFRecordWriter(os.path.join(directory, f"train-{f}.tfrecord")) for f in range(files)]
    for r in range(records):
        raw = rng.random_raw(SIDE * SIDE * CHANNELS + 1)
        image = (raw[:-1] & 0xFF).astype(np.uint8).tobytes()
        ex = tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(raw[-1] % 10)]))}))
        writers[r % files].write(ex.SerializeToString())
    for w in writers:
        w.close()


def build_expert(tf, pattern, threads):
    """The layout the tf.data performance guide leads to: shuffle and batch the serialized records,
    then parse and decode a whole batch per call with vectorised ops."""
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse_and_decode_batch(records):
        f = tf.io.parse_example(records, spec)
        images = tf.reshape(tf.io.decode_raw(f["image"], tf.uint8), [-1, SIDE, SIDE, CHANNELS])
        images = tf.cast(images, tf.float32) * (1.0 / 255.0)
        # On a 4-D batch each image is flipped or not on its own coin, as in the per-element map.
        return {"image": tf.image.random_flip_left_right(images), "label": f["label"]}

    files = tf.data.Dataset.list_files(pattern, shuffle=False)
    ds = (files.interleave(tf.data.TFRecordDataset, cycle_length=threads, block_length=16,
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
          .shuffle(SHUFFLE, seed=7)
          .batch(BATCH)
          .map(parse_and_decode_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
          .prefetch(tf.data.AUTOTUNE))
    options = tf.data.Options()
    options.deterministic = False
    options.threading.private_threadpool_size = threads
    return ds.with_options(options)


def build(tf, pattern, threads, autotune, maps_inside):
    par = tf.data.AUTOTUNE if autotune else threads
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        f = tf.io.parse_single_example(record, spec)
        image = tf.reshape(tf.io.decode_raw(f["image"], tf.uint8), [SIDE, SIDE, CHANNELS])
        return {"image": image, "label": f["label"]}

    def decode(e):
        image = tf.cast(e["image"], tf.float32) * (1.0 / 255.0)
        return {"image": tf.image.random_flip_left_right(image), "label": e["label"]}

    files = tf.data.Dataset.list_files(pattern, shuffle=False)
    if maps_inside:
        ds = files.interleave(lambda f: tf.data.TFRecordDataset(f).map(parse).map(decode), cycle_length=threads,
                              block_length=16, num_parallel_calls=par, deterministic=True)
    else:
        ds = (files.interleave(tf.data.TFRecordDataset, cycle_length=threads, block_length=16,
                               num_parallel_calls=par, deterministic=True)
              .map(parse, num_parallel_calls=par, deterministic=True)
              .map(decode, num_parallel_calls=par, deterministic=True))
    ds = (ds.shuffle(SHUFFLE, seed=7)
          .batch(BATCH)
          .prefetch(tf.data.AUTOTUNE if autotune else 4))
    options = tf.data.Options()
    options.deterministic = True
    options.threading.private_threadpool_size = threads
    return ds.with_options(options)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, help="directory holding train-*.tfrecord")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="3 reps")
    p.add_argument("--autotune", action="store_true", help="tf.data.AUTOTUNE instead of explicit numbers")
    p.add_argument("--layouts", default="maps_inside,maps_after,expert",
                   help="comma-separated layouts to time (maps_inside, maps_after, expert)")
    p.add_argument("--make-files", action="store_true", help="write the files into --dir first")
    p.add_argument("--records", type=int, default=50000, help="with --make-files")
    p.add_argument("--files", type=int, default=8, help="with --make-files")
    args = p.parse_args()
    reps = 3 if args.quick else args.reps

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        print("tfdata_reference: skipping, tensorflow is not installed (pip install tensorflow-cpu)")
        return 0
    # Must precede any op: TF fixes its pools on first use.
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)

    if args.make_files:
        print(f"writing {args.records} Examples into {args.files} files under {args.dir}", flush=True)
        make_files(tf, args.dir, args.records, args.files)
    pattern = os.path.join(args.dir, "train-*.tfrecord")
    if not glob.glob(pattern):
        sys.exit(f"tfdata_reference: no {pattern}; run build/bench/bench_pipeline --dir {args.dir} "
                 "or add --make-files")
    builders = {"maps_inside": lambda: build(tf, pattern, args.threads, args.autotune, True),
                "maps_after": lambda: build(tf, pattern, args.threads, args.autotune, False),
                "expert": lambda: build_expert(tf, pattern, args.threads)}
    wanted = [name for name in args.layouts.split(",") if name]
    unknown = [name for name in wanted if name not in builders]
    if unknown or not wanted:
        sys.exit(f"tfdata_reference: unknown layouts {unknown}; choose from {', '.join(builders)}")
    layouts = {name: builders[name]() for name in wanted}

    def python_loop(ds):
        n = 0
        for batch in ds:
            n += batch["label"].shape[0]
        return n

    def graph_loop(ds):
        return int(ds.reduce(tf.constant(0, tf.int64),
                             lambda n, b: n + tf.shape(b["label"], out_type=tf.int64)[0]))

    records = None
    for ds in layouts.values():  # warm-up (page cache, tracing, thread pools) of every variant
        for loop in (python_loop, graph_loop):
            seen = loop(ds)
            if records is None:
                records = seen
            if seen != records:
                sys.exit("tfdata_reference: the variants saw different record counts")
    times = {(name, loop): [] for name in layouts for loop in (python_loop, graph_loop)}
    cpu_times = {key: [] for key in times}
    for _ in range(reps):
        for (name, loop), ts in times.items():  # alternate so machine noise hits all alike
            start, cpu_start = time.perf_counter(), time.process_time()
            seen = loop(layouts[name])
            ts.append(time.perf_counter() - start)
            cpu_times[(name, loop)].append(time.process_time() - cpu_start)  # every thread of the process
            if seen != records:
                sys.exit(f"tfdata_reference: saw {seen} of {records} records")
    rates = {(name, loop.__name__): records / statistics.median(ts) for (name, loop), ts in times.items()}
    # CPU per element, like bench_pipeline's cpu_us_per_element: on a loaded machine it moves less
    # than the wall-clock rate, which shows how much of a slow run was waiting for a core.
    cpu_us = {(name, loop.__name__): 1e6 * statistics.median(cs) / records for (name, loop), cs in cpu_times.items()}
    best = max(rates, key=rates.get)
    per_layout = {name: max(rate for (n, _), rate in rates.items() if n == name) for name in layouts}
    per_layout_cpu_us = {name: cpu_us[max(((n, loop) for (n, loop) in rates if n == name), key=rates.get)]
                         for name in layouts}
    mode = "autotune" if args.autotune else "explicit"
    for (name, loop), rate in rates.items():
        how = "AUTOTUNE, deterministic=False" if name == "expert" else f"{mode}, deterministic"
        print(f"tf.data ({name}, {how}, {loop}): {rate:.0f} elements/s, {cpu_us[(name, loop)]:.1f} us CPU per element "
              f"on {args.threads} threads (median of {reps})")
    print(json.dumps({"bench": "tfdata_reference", "tensorflow": tf.__version__, "threads": args.threads,
                      "records": records, "mode": mode, "reps": reps,
                      "elements_per_s": round(rates[best], 1), "fastest": f"{best[0]}, {best[1]}",
                      "cpu_us_per_element": round(cpu_us[best], 2),
                      **{f"elements_per_s_{name}": round(rate, 1) for name, rate in per_layout.items()},
                      **{f"cpu_us_per_element_{name}": round(us, 2) for name, us in per_layout_cpu_us.items()},
                      **{f"elements_per_s_{name}_{loop}": round(rate, 1) for (name, loop), rate in rates.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
