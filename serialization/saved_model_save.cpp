// Writing a SavedModel directory: checked first, written into a temporary sibling, listed in the
// manifest, then renamed into place.

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "saved_model.capnp.h"
#include "serialization/checkpoint.hpp"
#include "serialization/graph_codec.hpp"
#include "serialization/saved_model.hpp"
#include "serialization/saved_model_files.hpp"

namespace af::saved_model {

namespace fs = std::filesystem;
using namespace detail;

namespace {

error invalid(const std::string& what) { return make_error(errc::invalid_argument, "saved_model::save: " + what); }

error fs_error(const std::string& what, const std::string& path, const std::error_code& ec) {
  return make_error(errc::io_error, "saved_model::save: " + what + " '" + path + "': " + ec.message());
}

// Every capture of every signature is a variable with its parameter's exact type.
expected<void> check_captures(const graph::module& functions, const std::vector<named_tensor>& variables) {
  std::map<std::string_view, const tensor*> by_name;
  for (const auto& [name, value] : variables) {
    if (!value.defined()) return invalid("variable '" + name + "' is undefined");
    if (!by_name.emplace(name, &value).second) return invalid("variable '" + name + "' is given twice");
  }
  for (const auto& s : functions.signatures) {
    const graph::graph& body = *functions.find_function(s.function);
    for (std::size_t i = 0; i < s.captures.size(); ++i) {
      const auto& param = body.at(body.parameters()[s.inputs.size() + i]).out;
      auto found = by_name.find(s.captures[i]);
      if (found == by_name.end())
        return invalid("signature '" + s.name + "' captures '" + s.captures[i] + "', which is not among the variables");
      const graph::value_type actual{found->second->type(), found->second->shape()};
      if (!(actual == param))
        return invalid("variable '" + s.captures[i] + "' is " + to_string(actual) + ", signature '" + s.name +
                       "' takes " + to_string(param));
    }
  }
  return {};
}

std::string encode_saved_model(const graph::module& functions, const save_options& options,
                               const std::vector<std::string>& asset_names) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<schema::SavedModel>();
  root.setFormatVersion(format_version);
  root.setProducer("actorflow " AF_VERSION);
  root.setCreatedUnixSeconds(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  root.setOpSetVersion(graph::op_set_version);
  auto tags = root.initTags(static_cast<unsigned>(options.tags.size()));
  for (std::size_t i = 0; i < options.tags.size(); ++i) tags.set(static_cast<unsigned>(i), options.tags[i]);
  const std::string module_bytes = encode_module(functions);
  root.setModule(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(module_bytes.data()), module_bytes.size()));
  auto assets = root.initAssets(static_cast<unsigned>(asset_names.size()));
  for (std::size_t i = 0; i < asset_names.size(); ++i) assets.set(static_cast<unsigned>(i), asset_names[i]);
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// Every file under `root`, relative, with its SHA-256.
expected<std::vector<manifest_entry>> digest_tree(const std::string& root) {
  std::vector<manifest_entry> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it{root, ec}, end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    AF_TRY_ASSIGN(auto bytes, read_file(it->path().string()));
    out.push_back({fs::relative(it->path(), root).generic_string(), sha256_hex(bytes)});
  }
  if (ec) return fs_error("cannot list", root, ec);
  return out;
}

std::string sibling(const std::string& dir, const char* kind) {
  static std::atomic<uint64_t> counter{0};
  return dir + "." + kind + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

expected<void> write_tree(const std::string& tmp, const graph::module& functions, const std::vector<named_tensor>& variables,
                          const save_options& options, const std::vector<std::string>& asset_names) {
  std::error_code ec;
  if (!fs::create_directories(tmp, ec)) return fs_error("cannot create directory", tmp, ec);
  ckpt::checkpoint ck;
  ck.tensors = variables;
  ck.metadata = {{"contents", "saved_model variables"}};
  AF_TRY(ckpt::save(tmp + "/" + std::string{variables_dir}, ck));
  if (!asset_names.empty()) {
    const std::string assets = tmp + "/" + std::string{assets_dir};
    if (!fs::create_directories(assets, ec)) return fs_error("cannot create directory", assets, ec);
    for (std::size_t i = 0; i < options.assets.size(); ++i) {
      AF_TRY_ASSIGN(auto bytes, read_file(options.assets[i]));
      AF_TRY(write_file(assets + "/" + asset_names[i], bytes));
    }
  }
  AF_TRY(write_file(tmp + "/" + std::string{model_file}, encode_saved_model(functions, options, asset_names)));
  AF_TRY_ASSIGN(auto entries, digest_tree(tmp));
  return write_file(tmp + "/" + std::string{manifest_file}, render_manifest(std::move(entries)));
}

}  // namespace

expected<void> save(const graph::module& functions, const std::vector<named_tensor>& variables, const std::string& dir_arg,
                    save_options options) {
  if (auto ok = functions.verify(); !ok) return invalid(ok.error_value().message);
  if (functions.signatures.empty()) return invalid("no signature: a caller could not call anything");
  AF_TRY(check_captures(functions, variables));
  std::vector<std::string> asset_names;
  std::set<std::string> seen;
  for (const auto& a : options.assets) {
    std::string name = fs::path(a).filename().string();
    if (name.empty() || !seen.insert(name).second) return invalid("asset '" + a + "': its file name is empty or used twice");
    asset_names.push_back(std::move(name));
  }
  std::string dir = fs::path(dir_arg).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  const bool exists = fs::exists(dir, ec);
  if (exists && !options.overwrite)
    return invalid("'" + dir + "' exists (pass overwrite = true to replace it)");
  if (const auto parent = fs::path(dir).parent_path(); !parent.empty()) fs::create_directories(parent, ec);

  const std::string tmp = sibling(dir, "tmp");
  if (auto written = write_tree(tmp, functions, variables, options, asset_names); !written) {
    fs::remove_all(tmp, ec);
    return written.error_value();
  }
  // Into place: the old directory (if replaced) moves aside first, so `dir` is always one whole
  // SavedModel or absent for an instant, never a mix.
  std::string old;
  if (exists) {
    old = sibling(dir, "old");
    fs::rename(dir, old, ec);
    if (ec) {
      fs::remove_all(tmp, ec);
      return fs_error("cannot move aside", dir, ec);
    }
  }
  fs::rename(tmp, dir, ec);
  if (ec) {
    const auto failed = fs_error("cannot rename into place", tmp, ec);
    if (!old.empty()) fs::rename(old, dir, ec);
    fs::remove_all(tmp, ec);
    return failed;
  }
  if (!old.empty()) fs::remove_all(old, ec);
  return {};
}

expected<void> save(const nn::model& model, const std::string& dir, save_options options) {
  AF_TRY_ASSIGN(auto body, model.inference_graph());
  graph::module functions;
  const std::size_t inputs = model.input_names().size();
  functions.signatures.push_back(graph::signature_of(std::string{default_signature}, "inference", body, inputs));
  functions.functions.push_back({"inference", std::move(body)});
  std::vector<named_tensor> variables;
  for (std::size_t i = 0; i < model.weights().size(); ++i)
    variables.push_back({model.weights()[i].name, model.weight_values()[i]});
  return save(functions, variables, dir, std::move(options));
}

}  // namespace af::saved_model
