// `actorflow saved_model show|run`, in the shape of TensorFlow's saved_model_cli:
//   show --dir D                                  the tag-set the directory serves
//   show --dir D --tag_set serve                  its signatures
//   show --dir D --tag_set serve --signature_def NAME [--dot]
//                                                 a signature's inputs and outputs (or its graph)
//   show --dir D --all                            metadata and every signature
//   run  --dir D --signature_def NAME --inputs 'x=a.npy;y=b.npy' [--outdir OUT [--overwrite]]
//                                                 outputs printed, or written as OUT/<name>.npy

#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "actors/runtime.hpp"
#include "apps/commands.hpp"
#include "serialization/npy.hpp"
#include "serialization/saved_model.hpp"

namespace af::apps {

namespace {

int usage(FILE* out) {
  std::fprintf(out,
               "usage: actorflow saved_model show --dir DIR [--all | --tag_set TAGS [--signature_def NAME [--dot]]]\n"
               "       actorflow saved_model run --dir DIR --signature_def NAME --inputs 'NAME=FILE.npy[;NAME=FILE.npy...]'\n"
               "                                 [--outdir DIR [--overwrite]]\n");
  return out == stderr ? 2 : 0;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "actorflow saved_model: %s\n", message.c_str());
  return 1;
}

std::string dims_text(const shape& dims) {
  std::string out = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + (dims.size() == 1 ? ",)" : ")");
}

void print_signature(const saved_model::loaded_model& m, const graph::signature& s) {
  std::printf("signature '%s' (function '%s'):\n  inputs:\n", s.name.c_str(), s.function.c_str());
  for (const auto& in : s.inputs)
    std::printf("    '%s': %s %s\n", in.name.c_str(), std::string{to_string(in.type.type)}.c_str(), dims_text(in.type.dims).c_str());
  std::printf("  outputs:\n");
  for (const auto& out : s.outputs)
    std::printf("    '%s': %s %s\n", out.name.c_str(), std::string{to_string(out.type.type)}.c_str(), dims_text(out.type.dims).c_str());
  int64_t elements = 0, bytes = 0;
  for (const auto& name : s.captures)
    for (const auto& v : m.variables())
      if (v.name == name) {
        elements += v.value.numel();
        bytes += static_cast<int64_t>(v.value.nbytes());
      }
  std::printf("  captures %zu variables (%" PRId64 " values, %" PRId64 " bytes)\n", s.captures.size(), elements, bytes);
}

std::string joined_tags(const saved_model::metadata& info) {
  std::string out;
  for (const auto& t : info.tags) out += (out.empty() ? "" : ",") + t;
  return out;
}

void print_metadata(const saved_model::metadata& info) {
  char when[64] = "?";
  const std::time_t t = static_cast<std::time_t>(info.created_unix_seconds);
  if (std::tm utc{}; gmtime_r(&t, &utc)) std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  std::printf("format version %u, op set %u, written by %s at %s\ntag-set: %s\n", info.format_version, info.op_set_version,
              info.producer.c_str(), when, joined_tags(info).c_str());
  for (const auto& a : info.assets) std::printf("asset: assets/%s\n", a.c_str());
}

int show(const std::map<std::string, std::string>& flags) {
  auto loaded = saved_model::load(flags.at("--dir"));
  if (!loaded) return fail(loaded.error_value().to_string());
  if (flags.count("--all")) {
    print_metadata(loaded->info());
    for (const auto& s : loaded->signatures()) {
      std::printf("\n");
      print_signature(*loaded, s);
    }
    return 0;
  }
  if (!flags.count("--tag_set")) {
    std::printf("The SavedModel serves tag-set '%s' (see --tag_set)\n", joined_tags(loaded->info()).c_str());
    return 0;
  }
  if (flags.at("--tag_set") != joined_tags(loaded->info()))
    return fail("no tag-set '" + flags.at("--tag_set") + "'; the SavedModel serves '" + joined_tags(loaded->info()) + "'");
  if (!flags.count("--signature_def")) {
    std::printf("Tag-set '%s' has these signatures:\n", flags.at("--tag_set").c_str());
    for (const auto& s : loaded->signatures()) std::printf("  %s\n", s.name.c_str());
    return 0;
  }
  const std::string& name = flags.at("--signature_def");
  const auto* s = loaded->find_signature(name);
  if (!s) return fail("no signature '" + name + "' (--tag_set shows them)");
  if (flags.count("--dot")) {
    std::fputs(loaded->saved_graph(name)->to_dot(s->function).c_str(), stdout);
    return 0;
  }
  print_signature(*loaded, *s);
  return 0;
}

void print_tensor(const std::string& name, const tensor& t) {
  std::printf("'%s': %s%s\n", name.c_str(), std::string{to_string(t.type())}.c_str(), to_string(t.shape()).c_str());
  if (is_string(t.type())) {  // quoted and escaped
    std::printf("%s\n", t.to_string(1000).c_str());
    return;
  }
  auto as_f64 = t.contiguous();
  if (!as_f64) return;
  const int64_t shown = std::min<int64_t>(t.numel(), 1000);
  std::string line = "[";
  for (int64_t i = 0; i < shown; ++i) {
    char buf[40];
    const char* p = static_cast<const char*>(as_f64->raw_data());
    double v = 0;
    switch (t.type()) {
      case dtype::f32: v = reinterpret_cast<const float*>(p)[i]; break;
      case dtype::f64: v = reinterpret_cast<const double*>(p)[i]; break;
      case dtype::i64: v = static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]); break;
      case dtype::i32: v = reinterpret_cast<const int32_t*>(p)[i]; break;
      case dtype::i8: v = reinterpret_cast<const int8_t*>(p)[i]; break;
      case dtype::u8: case dtype::boolean: v = reinterpret_cast<const uint8_t*>(p)[i]; break;
      default: v = 0;
    }
    std::snprintf(buf, sizeof buf, "%s%.9g", i ? ", " : "", v);
    line += buf;
  }
  std::printf("%s%s]\n", line.c_str(), shown < t.numel() ? ", ..." : "");
}

int run(const std::map<std::string, std::string>& flags) {
  for (const char* required : {"--signature_def", "--inputs"})
    if (!flags.count(required)) return fail(std::string{"run needs "} + required);
  auto loaded = saved_model::load(flags.at("--dir"));
  if (!loaded) return fail(loaded.error_value().to_string());
  std::vector<named_tensor> inputs;
  std::string spec = flags.at("--inputs");
  for (std::size_t start = 0; start <= spec.size();) {
    const std::size_t end = std::min(spec.find(';', start), spec.size());
    const std::string item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return fail("--inputs: '" + item + "' is not NAME=FILE.npy");
    auto value = npy::read(item.substr(eq + 1));
    if (!value) return fail("--inputs '" + item.substr(0, eq) + "': " + value.error_value().to_string());
    inputs.push_back({item.substr(0, eq), std::move(*value)});
  }
  // The signature runs on the runtime's device actor, as every graph does (ops/runtime/executor.hpp).
  runtime rt{{.scheduler_threads = 1}};
  auto outputs = loaded->call(flags.at("--signature_def"), inputs);
  if (!outputs) return fail(outputs.error_value().to_string());
  if (!flags.count("--outdir")) {
    for (const auto& o : *outputs) print_tensor(o.name, o.value);
    return 0;
  }
  const std::filesystem::path dir = flags.at("--outdir");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (const auto& o : *outputs) {
    std::string file_name = o.name;
    for (char& c : file_name)
      if (c == '/' || c == ':') c = '_';
    const auto path = (dir / (file_name + ".npy")).string();
    if (!flags.count("--overwrite") && std::filesystem::exists(path, ec))
      return fail("'" + path + "' exists (--overwrite replaces it)");
    if (auto ok = npy::write(path, o.value); !ok) return fail(ok.error_value().to_string());
    std::printf("wrote '%s' (%s%s)\n", path.c_str(), std::string{to_string(o.value.type())}.c_str(),
                to_string(o.value.shape()).c_str());
  }
  return 0;
}

}  // namespace

int run_saved_model(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string verb = argv[1];
  if (verb == "-h" || verb == "--help") return usage(stdout);
  if (verb != "show" && verb != "run") {
    std::fprintf(stderr, "actorflow saved_model: unknown verb '%s' (show or run)\n", verb.c_str());
    return usage(stderr);
  }
  std::map<std::string, std::string> flags;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--all" || flag == "--dot" || flag == "--overwrite") {
      flags[flag] = "";
    } else if (flag == "--dir" || flag == "--tag_set" || flag == "--signature_def" || flag == "--inputs" || flag == "--outdir") {
      if (i + 1 >= argc) return fail(flag + " needs a value");
      flags[flag] = argv[++i];
    } else {
      std::fprintf(stderr, "actorflow saved_model: unknown argument '%s'\n", flag.c_str());
      return usage(stderr);
    }
  }
  if (!flags.count("--dir")) return fail("--dir DIR is required");
  return verb == "show" ? show(flags) : run(flags);
}

}  // namespace af::apps
