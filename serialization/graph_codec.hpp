#pragma once

// Graphs as bytes (serialization/schema/graph.capnp): a module of named functions and signatures,
// or a single graph. Decoding checks everything a writer could have got wrong or a file could have
// lost — the op-set version, every op name against this build's definitions, attribute kinds,
// node order and arities, every recorded type against inference, constant sizes, fused programs,
// signatures against their functions — and fails with malformed_input or unsupported naming the
// function, node and field. It never throws and never crashes on any bytes.

#include <cstddef>
#include <string>
#include <string_view>

#include "ops/graph/module.hpp"

namespace af {

/// The module as one flat Cap'n Proto message.
std::string encode_module(const graph::module& m);
/// `source` names the bytes in errors ("model/graph.afg").
expected<graph::module> decode_module(const void* bytes, std::size_t size, std::string_view source = "graph");

/// One graph: a module with a single function "main" and no signatures.
std::string encode_graph(const graph::graph& g);
expected<graph::graph> decode_graph(const void* bytes, std::size_t size, std::string_view source = "graph");

}  // namespace af
