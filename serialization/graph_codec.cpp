#include "serialization/graph_codec.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <memory>
#include <new>
#include <unordered_set>
#include <variant>

#include "graph.capnp.h"
#include "ops/passes/fusion.hpp"
#include "serialization/tensor_codec.hpp"

namespace af {

namespace {

using graph::node_id;

// -- encoding ---------------------------------------------------------------------------------------

void put_type(schema::ValueType::Builder out, const graph::value_type& t) {
  out.setDtype(static_cast<uint8_t>(t.type));
  auto dims = out.initDims(static_cast<unsigned>(t.dims.size()));
  for (std::size_t i = 0; i < t.dims.size(); ++i) dims.set(static_cast<unsigned>(i), t.dims[i]);
}

template <class List, class Values>
void put_list(List list, const Values& values) {
  for (std::size_t i = 0; i < values.size(); ++i) list.set(static_cast<unsigned>(i), values[i]);
}

void put_attrs(capnp::List<schema::Attr>::Builder out, const op_attrs& attrs) {
  for (std::size_t i = 0; i < attrs.entries().size(); ++i) {
    const auto& [name, value] = attrs.entries()[i];
    auto a = out[static_cast<unsigned>(i)];
    a.setName(name);
    auto v = a.initValue();
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t>) v.setInteger(x);
          else if constexpr (std::is_same_v<T, double>) v.setNumber(x);
          else if constexpr (std::is_same_v<T, std::vector<int64_t>>) put_list(v.initIntegers(static_cast<unsigned>(x.size())), x);
          else if constexpr (std::is_same_v<T, std::vector<double>>) put_list(v.initNumbers(static_cast<unsigned>(x.size())), x);
          else v.setText(x);
        },
        value);
  }
}

void put_program(schema::FusedProgram::Builder out, const graph::fused_program& p) {
  auto inputs = out.initInputs(static_cast<unsigned>(p.inputs.size()));
  for (std::size_t i = 0; i < p.inputs.size(); ++i) put_type(inputs[static_cast<unsigned>(i)], p.inputs[i]);
  auto steps = out.initSteps(static_cast<unsigned>(p.steps.size()));
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const auto& s = p.steps[i];
    auto step = steps[static_cast<unsigned>(i)];
    step.setOp(s.op);
    put_list(step.initArgs(static_cast<unsigned>(s.args.size())), s.args);
    put_attrs(step.initAttrs(static_cast<unsigned>(s.attrs.entries().size())), s.attrs);
    put_type(step.initOut(), s.out);
  }
}

void put_graph(schema::Graph::Builder out, const graph::graph& g) {
  auto nodes = out.initNodes(static_cast<unsigned>(g.size()));
  for (std::size_t i = 0; i < g.size(); ++i) {
    const auto& n = g.nodes()[i];
    auto node = nodes[static_cast<unsigned>(i)];
    node.setOp(n.op);
    put_type(node.initOut(), n.out);
    put_list(node.initInputs(static_cast<unsigned>(n.inputs.size())), n.inputs);
    put_attrs(node.initAttrs(static_cast<unsigned>(n.attrs.entries().size())), n.attrs);
    node.setDevice(n.device);
    node.setLabel(n.label);
    const auto id = static_cast<node_id>(i);
    if (n.kind == graph::node_kind::constant) {
      // A constant made by the builder is a value it holds; contiguous() of a contiguous tensor
      // cannot fail, and a strided one is copied (out of memory is the only failure).
      const tensor value = g.constant_value(id).contiguous().value();
      node.setConstant(kj::arrayPtr(static_cast<const kj::byte*>(value.raw_data()), value.nbytes()));
    }
    if (n.kind == graph::node_kind::fused) put_program(node.initProgram(), g.program(id));
  }
  auto inputs = out.initInputs(static_cast<unsigned>(g.parameters().size()));
  for (std::size_t k = 0; k < g.parameters().size(); ++k) {
    inputs[static_cast<unsigned>(k)].setName(g.at(g.parameters()[k]).label);
    inputs[static_cast<unsigned>(k)].setNode(g.parameters()[k]);
  }
  auto outputs = out.initOutputs(static_cast<unsigned>(g.outputs().size()));
  for (std::size_t k = 0; k < g.outputs().size(); ++k) {
    outputs[static_cast<unsigned>(k)].setName(g.output_names()[k]);
    outputs[static_cast<unsigned>(k)].setNode(g.outputs()[k]);
  }
}

void put_specs(capnp::List<schema::TensorSpec>::Builder out, const std::vector<graph::tensor_spec>& specs) {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    out[static_cast<unsigned>(i)].setName(specs[i].name);
    put_type(out[static_cast<unsigned>(i)].initType(), specs[i].type);
  }
}

// -- decoding ---------------------------------------------------------------------------------------

// Every failure below is a value of this type, thrown inside the decoder and caught at its entry so
// that each check is one line; the message gets the source's name there.
struct bad_graph {
  errc code;
  std::string what;
};

[[noreturn]] void refuse(std::string what, errc code = errc::malformed_input) { throw bad_graph{code, std::move(what)}; }

// Names, labels, devices and string attributes: no NUL inside (C strings and the Text encoding
// would cut them short, and a re-encoded module would then differ from what was checked).
std::string text(capnp::Text::Reader t, const std::string& where) {
  std::string out(t.cStr(), t.size());
  if (out.find('\0') != std::string::npos) refuse(where + ": text '" + out.substr(0, out.find('\0')) + "' holds a NUL byte");
  return out;
}

graph::value_type get_type(schema::ValueType::Reader in, const std::string& where) {
  auto type = value_dtype_from_code(in.getDtype());
  if (!type) refuse(where + ": " + type.error_value().message, errc::unknown_dtype);
  auto dims = in.getDims();
  if (dims.size() > max_tensor_rank) refuse(where + ": rank " + std::to_string(dims.size()) + " is over " + std::to_string(max_tensor_rank));
  graph::value_type out{*type, {}};
  for (int64_t d : dims) {
    if (d < -1) refuse(where + ": dimension " + std::to_string(d));
    out.dims.push_back(d);
  }
  return out;
}

op_attrs get_attrs(capnp::List<schema::Attr>::Reader in, const std::string& where) {
  op_attrs out;
  for (auto a : in) {
    const std::string name = text(a.getName(), where + " attribute name");
    if (out.find(name)) refuse(where + ": attribute '" + name + "' appears twice");
    auto v = a.getValue();
    switch (v.which()) {
      case schema::Attr::Value::INTEGER: out.set(name, v.getInteger()); break;
      case schema::Attr::Value::NUMBER: out.set(name, v.getNumber()); break;
      case schema::Attr::Value::INTEGERS: {
        std::vector<int64_t> xs;
        for (int64_t x : v.getIntegers()) xs.push_back(x);
        out.set(name, std::move(xs));
        break;
      }
      case schema::Attr::Value::NUMBERS: {
        std::vector<double> xs;
        for (double x : v.getNumbers()) xs.push_back(x);
        out.set(name, std::move(xs));
        break;
      }
      case schema::Attr::Value::TEXT: out.set(name, text(v.getText(), where + " attribute '" + name + "'")); break;
      default: refuse(where + ": attribute '" + name + "' has a kind this build does not know");
    }
  }
  return out;
}

const graph::op_def& known_op(const std::string& op, const std::string& where) {
  const graph::op_def* def = graph::find_op(op);
  if (!def) refuse(where + ": unknown op '" + op + "'", errc::unsupported);
  return *def;
}

std::shared_ptr<const graph::fused_program> get_program(schema::FusedProgram::Reader in, const std::vector<graph::value_type>& args,
                                                        const graph::value_type& out, const std::string& where) {
  auto p = std::make_shared<graph::fused_program>();
  for (auto t : in.getInputs()) p->inputs.push_back(get_type(t, where + " program input"));
  std::size_t values = p->inputs.size();
  for (auto s : in.getSteps()) {
    const std::string at = where + " step " + std::to_string(p->steps.size());
    graph::fused_step step;
    step.op = text(s.getOp(), at);
    const auto& def = known_op(step.op, at);
    if (!def.fusion) refuse(at + ": op '" + step.op + "' cannot be fused");
    for (int32_t a : s.getArgs()) {
      if (a < 0 || static_cast<std::size_t>(a) >= values) refuse(at + ": argument " + std::to_string(a) + " is not an earlier value");
      step.args.push_back(a);
    }
    step.attrs = get_attrs(s.getAttrs(), at);
    step.out = get_type(s.getOut(), at);
    p->steps.push_back(std::move(step));
    ++values;
  }
  if (p->steps.empty()) refuse(where + ": a fused program without steps");
  auto checked = p->verify(args, out);
  if (!checked) refuse(where + ": " + checked.error_value().message);
  return p;
}

tensor get_constant(capnp::Data::Reader bytes, const graph::value_type& type, const std::string& where) {
  if (is_string(type.type)) refuse(where + ": a constant of strings (graphs hold numeric constants only)", errc::unknown_dtype);
  for (int64_t d : type.dims)
    if (d < 0) refuse(where + ": a constant of unknown shape " + to_string(type.dims));
  const auto count = static_cast<uint64_t>(numel(type.dims));  // saturates: never more than the bytes there
  if (count > bytes.size() / size_of(type.type) || count * size_of(type.type) != bytes.size())
    refuse(where + ": " + std::to_string(bytes.size()) + " bytes of data for " + graph::to_string(type));
  const std::size_t expected = bytes.size();
  auto value = tensor::empty(type.dims, type.type);
  if (!value) refuse(where + ": " + value.error_value().message, value.error_value().code);
  if (expected) std::memcpy(value->raw_data(), bytes.begin(), expected);
  return *value;
}

graph::graph get_graph(schema::Graph::Reader in, const std::string& where) {
  graph::graph_builder b;
  std::vector<node_id> mapped;
  std::vector<node_id> parameters;  // by encoded index
  const auto nodes = in.getNodes();
  for (unsigned i = 0; i < nodes.size(); ++i) {
    const auto n = nodes[i];
    const std::string op = text(n.getOp(), where + " node " + std::to_string(i));
    const std::string at = where + " node " + std::to_string(i) + " (" + op + ")";
    const auto& def = known_op(op, where + " node " + std::to_string(i));
    const graph::value_type out = get_type(n.getOut(), at);
    std::vector<node_id> inputs;
    std::vector<graph::value_type> input_types;
    for (int32_t k : n.getInputs()) {
      if (k < 0 || static_cast<unsigned>(k) >= i) refuse(at + ": input " + std::to_string(k) + " does not come before it");
      inputs.push_back(mapped[static_cast<std::size_t>(k)]);
      input_types.push_back(b.type_of(inputs.back()));
    }
    op_attrs attrs = get_attrs(n.getAttrs(), at);
    std::string label = text(n.getLabel(), at + " label");
    const std::string device = text(n.getDevice(), at + " device");
    b.place_on(device);
    if (def.category == graph::op_category::source || def.category == graph::op_category::fused) {
      if (!attrs.entries().empty()) refuse(at + ": attributes on a " + op + " node");
      if (op == "parameter") {
        if (!inputs.empty()) refuse(at + ": a parameter takes no inputs");
        mapped.push_back(b.parameter(out, std::move(label)));
        parameters.push_back(static_cast<node_id>(i));
      } else if (op == "constant") {
        if (!inputs.empty()) refuse(at + ": a constant takes no inputs");
        mapped.push_back(b.constant(get_constant(n.getConstant(), out, at)));
      } else {
        if (!n.hasProgram()) refuse(at + ": no program");
        auto program = get_program(n.getProgram(), input_types, out, at);
        mapped.push_back(b.add_fused(std::move(inputs), std::move(program), out, std::move(label), device));
      }
      continue;
    }
    auto id = b.add(op, std::move(inputs), std::move(attrs), std::move(label));
    if (!id) refuse(at + ": " + id.error_value().message);
    if (!(b.type_of(*id) == out)) refuse(at + ": recorded " + graph::to_string(out) + " but its inputs give " + graph::to_string(b.type_of(*id)));
    mapped.push_back(*id);
  }
  const auto inputs = in.getInputs();
  if (inputs.size() != parameters.size())
    refuse(where + ": " + std::to_string(inputs.size()) + " inputs listed for " + std::to_string(parameters.size()) + " parameters");
  for (unsigned k = 0; k < inputs.size(); ++k) {
    const node_id p = parameters[k];
    const std::string name = text(inputs[k].getName(), where + " input " + std::to_string(k));
    if (inputs[k].getNode() != p) refuse(where + " input " + std::to_string(k) + ": names node " + std::to_string(inputs[k].getNode()) + ", the parameter is node " + std::to_string(p));
    if (name != b.at(mapped[static_cast<std::size_t>(p)]).label)
      refuse(where + " input " + std::to_string(k) + ": named '" + name + "' but its parameter is labelled '" +
             b.at(mapped[static_cast<std::size_t>(p)]).label + "'");
  }
  std::vector<node_id> outputs;
  std::vector<std::string> names;
  for (auto o : in.getOutputs()) {
    const std::string name = text(o.getName(), where + " output " + std::to_string(names.size()));
    if (o.getNode() < 0 || static_cast<std::size_t>(o.getNode()) >= mapped.size())
      refuse(where + " output '" + name + "': names node " + std::to_string(o.getNode()) + " of " + std::to_string(mapped.size()));
    outputs.push_back(mapped[static_cast<std::size_t>(o.getNode())]);
    names.push_back(name);
  }
  return std::move(b).finish(std::move(outputs), std::move(names));
}

std::vector<graph::tensor_spec> get_specs(capnp::List<schema::TensorSpec>::Reader in, const std::string& where) {
  std::vector<graph::tensor_spec> out;
  for (auto s : in) {
    std::string name = text(s.getName(), where + " " + std::to_string(out.size()));
    auto type = get_type(s.getType(), where + " '" + name + "'");
    out.push_back({std::move(name), std::move(type)});
  }
  return out;
}

graph::module get_module(schema::Module::Reader in) {
  if (in.getOpSetVersion() > graph::op_set_version)
    refuse("written for op set " + std::to_string(in.getOpSetVersion()) + "; this build knows op sets up to " +
               std::to_string(graph::op_set_version),
           errc::unsupported);
  graph::module m;
  for (auto f : in.getFunctions()) {
    const std::string name = text(f.getName(), "function " + std::to_string(m.functions.size()));
    m.functions.push_back({name, get_graph(f.getGraph(), "function '" + name + "'")});
  }
  for (auto s : in.getSignatures()) {
    std::string name = text(s.getName(), "signature " + std::to_string(m.signatures.size()));
    const std::string where = "signature '" + name + "'";
    graph::signature sig{std::move(name), text(s.getFunction(), where + " function"), get_specs(s.getInputs(), where + " input"),
                         get_specs(s.getOutputs(), where + " output"), {}};
    for (auto c : s.getCaptures()) sig.captures.push_back(text(c, where + " capture " + std::to_string(sig.captures.size())));
    sig.method_name = text(s.getMethodName(), where + " method name");
    m.signatures.push_back(std::move(sig));
  }
  auto checked = m.verify();
  if (!checked) refuse(checked.error_value().message);
  return m;
}

}  // namespace

std::string encode_module(const graph::module& m) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<schema::Module>();
  root.setOpSetVersion(graph::op_set_version);
  root.setProducer("actorflow");
  auto functions = root.initFunctions(static_cast<unsigned>(m.functions.size()));
  for (std::size_t i = 0; i < m.functions.size(); ++i) {
    functions[static_cast<unsigned>(i)].setName(m.functions[i].name);
    put_graph(functions[static_cast<unsigned>(i)].initGraph(), m.functions[i].body);
  }
  auto signatures = root.initSignatures(static_cast<unsigned>(m.signatures.size()));
  for (std::size_t i = 0; i < m.signatures.size(); ++i) {
    const auto& s = m.signatures[i];
    auto out = signatures[static_cast<unsigned>(i)];
    out.setName(s.name);
    out.setFunction(s.function);
    put_specs(out.initInputs(static_cast<unsigned>(s.inputs.size())), s.inputs);
    put_specs(out.initOutputs(static_cast<unsigned>(s.outputs.size())), s.outputs);
    auto captures = out.initCaptures(static_cast<unsigned>(s.captures.size()));
    for (std::size_t c = 0; c < s.captures.size(); ++c) captures.set(static_cast<unsigned>(c), s.captures[c]);
    out.setMethodName(s.method_name);
  }
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

expected<graph::module> decode_module(const void* bytes, std::size_t size, std::string_view source) {
  const std::string name{source};
  if (size == 0 || size % sizeof(capnp::word) != 0)
    return make_error(errc::malformed_input, name + ": " + std::to_string(size) + " bytes is not a whole number of words");
  try {
    // Word-aligned: the bytes may sit anywhere (a network buffer, a mapped file at an offset).
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
    std::memcpy(words.begin(), bytes, size);
    capnp::ReaderOptions options;
    // Reading may touch each word a few times (lists of lists), never more: amplification is bounded.
    options.traversalLimitInWords = 4 * words.size() + 1024;
    capnp::FlatArrayMessageReader reader(words, options);
    return get_module(reader.getRoot<schema::Module>());
  } catch (const bad_graph& e) {
    return make_error(e.code, name + ": " + e.what);
  } catch (const kj::Exception& e) {
    return make_error(errc::malformed_input, name + ": " + e.getDescription().cStr());
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, name + ": out of memory while decoding");
  }
}

std::string encode_graph(const graph::graph& g) {
  graph::module m;
  m.functions.push_back({"main", g});
  return encode_module(m);
}

expected<graph::graph> decode_graph(const void* bytes, std::size_t size, std::string_view source) {
  AF_TRY_ASSIGN(auto m, decode_module(bytes, size, source));
  if (m.functions.size() != 1 || !m.signatures.empty())
    return make_error(errc::malformed_input, std::string{source} + ": " + std::to_string(m.functions.size()) +
                                                 " functions and " + std::to_string(m.signatures.size()) +
                                                 " signatures where one graph was expected");
  return std::move(m.functions.front().body);
}

}  // namespace af
