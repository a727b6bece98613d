// What the README's C++ snippets may use without including it (tests/readme/extract_cpp.py):
// the public headers of every layer, as an application using actorflow includes them.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "actors/batching.hpp"
#include "actors/collectives.hpp"
#include "actors/device_actor.hpp"
#include "actors/graph_executor.hpp"
#include "actors/runtime.hpp"
#include "actors/serving_client.hpp"
#include "actors/stage.hpp"
#include "actors/tracing.hpp"
#include "ops/elementwise.hpp"
#include "ops/graph/graph.hpp"
#include "ops/graph/module.hpp"
#include "ops/linalg.hpp"
#include "ops/random.hpp"
#include "ops/runtime/function.hpp"
#include "ops/train/layers.hpp"
#include "strategies/strategy.hpp"
#include "ops/train/losses.hpp"
#include "ops/train/model.hpp"
#include "ops/train/optimizers.hpp"
#include "ops/train/schedules.hpp"
#include "pipeline/dataset.hpp"
#include "pipeline/feed.hpp"
#include "pipeline/iterator.hpp"
#include "pipeline/profiler.hpp"
#include "pipeline/records.hpp"
#include "serialization/graph_codec.hpp"
#include "serialization/saved_model.hpp"
#include "training/callbacks.hpp"
#include "training/digits.hpp"
#include "training/trainer.hpp"

using namespace std::chrono_literals;
