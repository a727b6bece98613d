#include "ops/codegen/cuda_fused.hpp"

#include <cstdio>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "ops/gpu.hpp"
#include "ops/graph/op_def.hpp"

namespace af::codegen {

namespace {

// The CUDA C of one step: its definition's expression with {0}, {1} the operands, {T} the value
// type and {f} the float suffix of math functions (expf vs exp).
expected<std::string> expression(const graph::fused_step& s, const std::vector<std::string>& a, const std::string& t,
                                 const char* f) {
  const graph::op_def* def = graph::find_op(s.op);
  if (!def || !def->fusion) return make_error(errc::unsupported, "no CUDA form for fused op '" + s.op + "'");
  AF_TRY_ASSIGN(auto attrs, graph::complete_attrs(*def, s.attrs));
  AF_TRY_ASSIGN(auto form, def->fusion(attrs));
  const std::string& pattern = form.cuda;
  std::string out = "(";
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const std::size_t close = pattern[i] == '{' ? pattern.find('}', i) : std::string::npos;
    if (close == std::string::npos) {
      out += pattern[i];
      continue;
    }
    const std::string key = pattern.substr(i + 1, close - i - 1);
    if (key == "T") out += t;
    else if (key == "f") out += f;
    else if (key.size() == 1 && key[0] >= '0' && key[0] < static_cast<char>('0' + a.size())) out += a[static_cast<std::size_t>(key[0] - '0')];
    else return make_error(errc::invalid_argument, "op '" + s.op + "': bad placeholder {" + key + "} in its CUDA form");
    i = close;
  }
  return out + ")";
}

// "v3". Built by appending: GCC 12 warns falsely (-Wrestrict) on "v" + std::to_string(...).
std::string value_name(std::size_t index) {
  std::string name{"v"};
  name += std::to_string(index);
  return name;
}

struct cache {
  std::mutex mtx;
  std::unordered_map<std::size_t, std::string> ptx;
  cuda_cache_stats stats;
};

cache& ptx_cache() {
  static cache c;
  return c;
}

}  // namespace

expected<cuda_source> emit_cuda(const graph::fused_program& p) {
  const dtype type = p.out().type;
  if (type != dtype::f32 && type != dtype::f64)
    return make_error(errc::dtype_mismatch, "CUDA fused kernels run f32 and f64, not " + std::string{to_string(type)});
  const std::string t = type == dtype::f32 ? "float" : "double";
  const char* suffix = type == dtype::f32 ? "f" : "";
  char name[32];
  std::snprintf(name, sizeof name, "fused_%016zx", std::hash<std::string>{}(t + ":" + p.to_string()));

  std::string params, loads, body;
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    const auto k = std::to_string(i);
    params += "const " + t + "* __restrict__ in" + k + ", long long stride" + k + ", ";
    loads += "    const " + t + " v" + k + " = in" + k + "[i * stride" + k + "];\n";
  }
  for (std::size_t k = 0; k < p.steps.size(); ++k) {
    std::vector<std::string> args;
    for (int a : p.steps[k].args) args.push_back(value_name(a));
    AF_TRY_ASSIGN(auto e, expression(p.steps[k], args, t, suffix));
    body += "    const " + t + " " + value_name(p.inputs.size() + k) + " = " + e + ";\n";
  }
  const std::string result = value_name(p.inputs.size() + p.steps.size() - 1);
  cuda_source out;
  out.kernel_name = name;
  out.source = "// " + p.to_string() + "\n" +
               "extern \"C\" __global__ void " + out.kernel_name + "(" + params + t + "* __restrict__ out, long long n) {\n" +
               "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n" +
               "       i += (long long)gridDim.x * blockDim.x) {\n" + loads + body + "    out[i] = " + result + ";\n" +
               "  }\n}\n";
  return out;
}

expected<std::string> compile_cuda(const graph::fused_program& program, const std::string& arch) {
  AF_TRY_ASSIGN(auto src, emit_cuda(program));
  // The options are compile_to_ptx's fixed set; they are part of the key through its version tag.
  const std::size_t key = std::hash<std::string>{}(src.source + "\n//arch=" + arch + "\n//options=v1");
  auto& c = ptx_cache();
  {
    std::lock_guard<std::mutex> guard{c.mtx};
    if (auto found = c.ptx.find(key); found != c.ptx.end()) {
      ++c.stats.hits;
      return found->second;
    }
  }
  AF_TRY_ASSIGN(auto ptx, gpu::compile_to_ptx(src.source, src.kernel_name + ".cu", arch));
  std::lock_guard<std::mutex> guard{c.mtx};
  ++c.stats.compiles;
  c.ptx.emplace(key, ptx);
  return ptx;
}

cuda_cache_stats cuda_cache_counters() {
  auto& c = ptx_cache();
  std::lock_guard<std::mutex> guard{c.mtx};
  return c.stats;
}

}  // namespace af::codegen
