// Random ops: samplers drawing from a seed attribute (stateful: two calls differ, so never merged
// or folded) and stateless_random_uniform, deterministic in its seed input and salt (dropout masks:
// a new seed per step without retracing; a resumed run draws the masks the uninterrupted one drew).

#include "ops/graph/defs/families.hpp"
#include "ops/random.hpp"

namespace af::graph::defs {

namespace {

expected<value_type> sampled_type(const std::vector<value_type>&, const op_attrs& a) {
  AF_TRY_ASSIGN(auto type, parse_dtype(string_of(a, "dtype")));
  return value_type{type, shape_attr(a, "shape")};
}

using sampler = expected<tensor> (*)(const shape&, uint64_t, dtype, double, double);

op_def sampler_def(std::string name, sampler sample, std::string first, double first_default, std::string second,
                   double second_default) {
  op_def d = basic_def(std::move(name), op_category::random, 0);
  d.stateful = true;
  d.attrs = {integers_attr("shape"), integer_attr("seed", 0), string_attr("dtype", std::string{"f32"}),
             number_attr(first, first_default), number_attr(second, second_default)};
  d.infer = sampled_type;
  d.cpu_kernel = [sample, first, second](const std::vector<tensor>&, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto type, parse_dtype(string_of(a, "dtype")));
    return one(sample(shape_attr(a, "shape"), static_cast<uint64_t>(int_attr(a, "seed")), type, number_of(a, first),
                      number_of(a, second)));
  };
  d.gradient = no_gradient_flows("it has no inputs");
  return d;
}

op_def stateless_random_uniform() {
  op_def d = basic_def("stateless_random_uniform", op_category::random, 1);
  // Deterministic in its inputs, but kept out of folding and merging like the samplers: a mask
  // is drawn where the step runs, never baked into a graph.
  d.stateful = true;
  d.attrs = {integers_attr("shape"), integer_attr("salt", 0), string_attr("dtype", std::string{"f32"})};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    if (in[0].type != dtype::i64) return mismatch(errc::dtype_mismatch, "stateless_random_uniform", in, "the seed must be i64");
    return sampled_type(in, a);
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    if (in[0].type() != dtype::i64 || in[0].numel() != 1)
      return make_error(errc::invalid_argument, std::string{"stateless_random_uniform: the seed must be one i64, got "} +
                                                    std::string{to_string(in[0].type())} + " " + to_string(in[0].shape()));
    AF_TRY_ASSIGN(auto type, parse_dtype(string_of(a, "dtype")));
    const auto seed = static_cast<uint64_t>(in[0].data<int64_t>()[0]);  // one element: strides do not matter
    // SplitMix64's finaliser: nearby (seed, salt) pairs give unrelated Philox keys.
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(int_attr(a, "salt")) + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return one(random_uniform(shape_attr(a, "shape"), z ^ (z >> 31), type, 0.0, 1.0));
  };
  d.gradient = no_gradient_flows("its output does not depend smoothly on the seed");
  return d;
}

}  // namespace

void define_random(std::vector<op_def>& out) {
  out.push_back(sampler_def("random_uniform", &random_uniform, "low", 0.0, "high", 1.0));
  out.push_back(sampler_def("random_normal", &random_normal, "mean", 0.0, "stddev", 1.0));
  out.push_back(stateless_random_uniform());
}

}  // namespace af::graph::defs
