// Loading a SavedModel directory: the manifest's digests, the model file, the mapped variables,
// the captures bound, the graphs re-optimised; and calling its signatures.

#include <capnp/serialize.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "ops/passes/passes.hpp"
#include "ops/runtime/executor.hpp"
#include "saved_model.capnp.h"
#include "serialization/checkpoint.hpp"
#include "serialization/graph_codec.hpp"
#include "serialization/saved_model.hpp"
#include "serialization/saved_model_files.hpp"

namespace af::saved_model {

using namespace detail;

struct bound_signature {
  std::string function;
  graph::graph saved;
  graph::graph running;
  std::vector<tensor> captured;  // the variables bound to the function's parameters after the inputs
};

struct loaded_model::impl {
  std::string dir;
  metadata info;
  std::vector<graph::signature> signatures;
  std::map<std::string, bound_signature, std::less<>> bound;
  ckpt::mapped_checkpoint variables;
  mutable std::once_flag verified_once;
  mutable error verified;
};

namespace {

error corrupt(const std::string& file, const std::string& what) {
  return make_error(errc::malformed_input, "SavedModel file '" + file + "': " + what);
}

struct decoded_file {
  metadata info;
  graph::module functions;
};

expected<decoded_file> decode_model_file(const std::string& path, const std::string& bytes) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0)
    return corrupt(path, std::to_string(bytes.size()) + " bytes is not a whole number of words (truncated?)");
  try {
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
    std::memcpy(words.begin(), bytes.data(), bytes.size());
    capnp::ReaderOptions options;
    options.traversalLimitInWords = 4 * words.size() + 1024;
    capnp::FlatArrayMessageReader reader(words, options);
    auto root = reader.getRoot<schema::SavedModel>();
    decoded_file out;
    out.info.format_version = root.getFormatVersion();
    if (out.info.format_version == 0 || out.info.format_version > format_version)
      return make_error(errc::unsupported, "SavedModel file '" + path + "': format version " +
                                               std::to_string(out.info.format_version) + "; this build reads 1 to " +
                                               std::to_string(format_version));
    out.info.op_set_version = root.getOpSetVersion();
    if (out.info.op_set_version > graph::op_set_version)
      return make_error(errc::unsupported, "SavedModel file '" + path + "': written for op set " +
                                               std::to_string(out.info.op_set_version) + "; this build knows op sets up to " +
                                               std::to_string(graph::op_set_version));
    out.info.producer = root.getProducer();
    out.info.created_unix_seconds = root.getCreatedUnixSeconds();
    for (auto t : root.getTags()) out.info.tags.emplace_back(t.cStr(), t.size());
    for (auto a : root.getAssets()) out.info.assets.emplace_back(a.cStr(), a.size());
    auto module_bytes = root.getModule();
    AF_TRY_ASSIGN(out.functions, decode_module(module_bytes.begin(), module_bytes.size(), path + " (its graphs)"));
    return out;
  } catch (const kj::Exception& e) {
    return corrupt(path, e.getDescription().cStr());
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, "SavedModel file '" + path + "': out of memory while decoding");
  }
}

// Every listed file but the variables' data matches its digest; the required files are listed.
expected<void> check_manifest(const std::string& dir, const std::vector<manifest_entry>& entries) {
  const std::string manifest = dir + "/" + std::string{manifest_file};
  for (std::string_view required : {model_file, std::string_view{"variables/index"}, std::string_view{"variables/metadata"},
                                    variables_data}) {
    bool listed = false;
    for (const auto& e : entries) listed = listed || e.path == required;
    if (!listed) return corrupt(manifest, "does not list '" + std::string{required} + "'");
  }
  for (const auto& e : entries) {
    if (e.path == variables_data) continue;  // per tensor CRC32C, checked before use (it may be large)
    const std::string path = dir + "/" + e.path;
    AF_TRY_ASSIGN(auto bytes, read_file(path));
    if (sha256_hex(bytes) != e.sha256) return corrupt(path, "its SHA-256 differs from the MANIFEST's (corrupt or changed file)");
  }
  return {};
}

// The captures of each signature, bound to the mapped variables of the same name and type.
expected<void> bind_captures(loaded_model::impl& m, const graph::module& functions, const load_options& options,
                    const std::string& model_path) {
  std::map<std::string_view, const tensor*> by_name;
  for (const auto& [name, value] : m.variables.ck.tensors) by_name.emplace(name, &value);
  for (const auto& s : functions.signatures) {
    bound_signature b;
    b.function = s.function;
    b.saved = *functions.find_function(s.function);
    for (std::size_t i = 0; i < s.captures.size(); ++i) {
      const auto& param = b.saved.at(b.saved.parameters()[s.inputs.size() + i]).out;
      auto found = by_name.find(s.captures[i]);
      if (found == by_name.end())
        return corrupt(model_path, "signature '" + s.name + "' captures '" + s.captures[i] + "', which variables/ lacks");
      const graph::value_type actual{found->second->type(), found->second->shape()};
      if (!(actual == param))
        return corrupt(model_path, "signature '" + s.name + "' takes '" + s.captures[i] + "' as " + to_string(param) +
                                       ", variables/ holds " + to_string(actual));
      b.captured.push_back(*found->second);
    }
    if (options.optimize) {
      auto optimized = graph::optimize(b.saved);
      if (!optimized) return with_context(optimized.error_value(), "SavedModel '" + m.dir + "': signature '" + s.name + "'");
      b.running = std::move(*optimized);
    } else {
      b.running = b.saved;
    }
    m.bound.emplace(s.name, std::move(b));
  }
  m.signatures = functions.signatures;
  return {};
}

bool fits(const graph::value_type& spec, const tensor& t) {
  if (t.type() != spec.type || static_cast<std::size_t>(t.ndim()) != spec.dims.size()) return false;
  for (std::size_t i = 0; i < spec.dims.size(); ++i)
    if (spec.dims[i] != -1 && spec.dims[i] != t.dim(static_cast<int>(i))) return false;
  return true;
}

}  // namespace

expected<loaded_model> load(const std::string& dir_arg, load_options options) {
  auto state = std::make_unique<loaded_model::impl>();
  state->dir = std::filesystem::path(dir_arg).lexically_normal().string();
  while (state->dir.size() > 1 && state->dir.back() == '/') state->dir.pop_back();
  const std::string& dir = state->dir;
  const std::string manifest_path = dir + "/" + std::string{manifest_file};
  AF_TRY_ASSIGN(auto manifest_text, read_file(manifest_path));
  AF_TRY_ASSIGN(auto entries, parse_manifest(manifest_text, "SavedModel file '" + manifest_path + "'"));
  AF_TRY(check_manifest(dir, entries));

  const std::string model_path = dir + "/" + std::string{model_file};
  AF_TRY_ASSIGN(auto model_bytes, read_file(model_path));
  AF_TRY_ASSIGN(auto decoded, decode_model_file(model_path, model_bytes));
  state->info = std::move(decoded.info);
  auto mapped = ckpt::load_mapped(dir + "/" + std::string{variables_dir});
  if (!mapped) return with_context(mapped.error_value(), "SavedModel '" + dir + "'");
  state->variables = std::move(*mapped);
  AF_TRY(bind_captures(*state, decoded.functions, options, model_path));
  loaded_model out{std::move(state)};
  if (options.verify_variables_now) AF_TRY(out.verify_variables());
  return out;
}

loaded_model::loaded_model(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
loaded_model::loaded_model(loaded_model&&) noexcept = default;
loaded_model& loaded_model::operator=(loaded_model&&) noexcept = default;
loaded_model::~loaded_model() = default;

const metadata& loaded_model::info() const { return impl_->info; }
const std::vector<graph::signature>& loaded_model::signatures() const { return impl_->signatures; }
const std::vector<named_tensor>& loaded_model::variables() const { return impl_->variables.ck.tensors; }

const graph::signature* loaded_model::find_signature(std::string_view name) const {
  for (const auto& s : impl_->signatures)
    if (s.name == name) return &s;
  return nullptr;
}

const graph::graph* loaded_model::saved_graph(std::string_view signature) const {
  auto it = impl_->bound.find(signature);
  return it == impl_->bound.end() ? nullptr : &it->second.saved;
}

const graph::graph* loaded_model::running_graph(std::string_view signature) const {
  auto it = impl_->bound.find(signature);
  return it == impl_->bound.end() ? nullptr : &it->second.running;
}

expected<void> loaded_model::verify_variables() const {
  std::call_once(impl_->verified_once, [&] {
    if (auto ok = ckpt::verify_digests(impl_->variables); !ok)
      impl_->verified = with_context(ok.error_value(), "SavedModel '" + impl_->dir + "'");
  });
  if (impl_->verified) return impl_->verified;
  return {};
}

expected<std::vector<tensor>> loaded_model::call(std::string_view name, const std::vector<tensor>& inputs) const {
  const graph::signature* s = find_signature(name);
  if (!s) return make_error(errc::invalid_argument, "SavedModel '" + impl_->dir + "' has no signature '" + std::string{name} + "'");
  const std::string where = "signature '" + s->name + "'";
  if (inputs.size() != s->inputs.size())
    return make_error(errc::invalid_argument, where + " takes " + std::to_string(s->inputs.size()) + " inputs, got " +
                                                  std::to_string(inputs.size()));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& spec = s->inputs[i];
    if (!inputs[i].defined()) return make_error(errc::invalid_argument, where + " input '" + spec.name + "' is undefined");
    if (!fits(spec.type, inputs[i]))
      return make_error(errc::invalid_argument, where + " input '" + spec.name + "' must be " + to_string(spec.type) + ", got " +
                                                    to_string(graph::value_type{inputs[i].type(), inputs[i].shape()}));
  }
  AF_TRY(verify_variables());
  const bound_signature& b = impl_->bound.find(s->name)->second;
  std::vector<tensor> args = inputs;
  args.insert(args.end(), b.captured.begin(), b.captured.end());
  auto out = execute(b.running, args);
  if (!out) return with_context(out.error_value(), where);
  return out;
}

expected<std::vector<named_tensor>> loaded_model::call(std::string_view name, const std::vector<named_tensor>& inputs) const {
  const graph::signature* s = find_signature(name);
  if (!s) return make_error(errc::invalid_argument, "SavedModel '" + impl_->dir + "' has no signature '" + std::string{name} + "'");
  std::vector<tensor> ordered;
  for (const auto& spec : s->inputs) {
    const named_tensor* given = nullptr;
    for (const auto& in : inputs)
      if (in.name == spec.name) given = &in;
    if (!given) return make_error(errc::invalid_argument, "signature '" + s->name + "': input '" + spec.name + "' is missing");
    ordered.push_back(given->value);
  }
  for (const auto& in : inputs) {
    bool known = false;
    for (const auto& spec : s->inputs) known = known || spec.name == in.name;
    if (!known) return make_error(errc::invalid_argument, "signature '" + s->name + "' has no input '" + in.name + "'");
  }
  AF_TRY_ASSIGN(auto values, call(name, ordered));
  std::vector<named_tensor> out;
  for (std::size_t i = 0; i < values.size(); ++i) out.push_back({s->outputs[i].name, std::move(values[i])});
  return out;
}

}  // namespace af::saved_model
