#include "ops/graph/fused_program.hpp"

#include <variant>

namespace af::graph {

expected<void> fused_program::verify(const std::vector<value_type>& in, const value_type& out_type) const {
  if (in.size() != inputs.size())
    return make_error(errc::invalid_argument, "fused program takes " + std::to_string(inputs.size()) + " inputs, got " +
                                                  std::to_string(in.size()));
  if (steps.empty()) return make_error(errc::invalid_argument, "fused program has no steps");
  std::vector<value_type> values = inputs;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (!(in[i] == inputs[i])) return make_error(errc::invalid_argument, "fused program input " + std::to_string(i) + " type differs");
  for (const auto& s : steps) {
    std::vector<value_type> args;
    for (int a : s.args) {
      if (a < 0 || static_cast<std::size_t>(a) >= values.size())
        return make_error(errc::invalid_argument, "fused step " + s.op + " reads a value not made yet");
      args.push_back(values[static_cast<std::size_t>(a)]);
    }
    AF_TRY_ASSIGN(auto inferred, infer_output(s.op, args, s.attrs));
    if (!(inferred == s.out)) return make_error(errc::invalid_argument, "fused step " + s.op + " type differs");
    values.push_back(std::move(inferred));
  }
  if (!(out() == out_type)) return make_error(errc::invalid_argument, "fused program output type differs from the node's");
  // A fused kernel reads every input as its output's element type, steps or no steps reading it
  // (an unread string or i32 input would otherwise reach the kernel).
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].type != out_type.type)
      return make_error(errc::invalid_argument, "fused program input " + std::to_string(i) + " is " + graph::to_string(inputs[i]) +
                                                    ", not the kernel's " + std::string{af::to_string(out_type.type)});
  return {};
}

std::string fused_program::to_string() const {
  std::string out;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const auto& s = steps[k];
    out += (k ? "; v" : "v") + std::to_string(inputs.size() + k) + " = " + s.op + "(";
    for (std::size_t i = 0; i < s.args.size(); ++i) out += (i ? ", v" : "v") + std::to_string(s.args[i]);
    for (const auto& [name, value] : s.attrs.entries())
      if (const auto* i = std::get_if<int64_t>(&value)) out += ", " + name + "=" + std::to_string(*i);
    out += ")";
  }
  return out;
}

}  // namespace af::graph
