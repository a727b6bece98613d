// A three-stage topology read from plain C++: a generator source, a transform that runs kernels,
// and a blocking reader. Every stage is an actor with bounded slots; nothing runs ahead of demand.
//
//   build/examples/pipeline_basics

#include <cstdio>
#include <optional>

#include "actors/runtime.hpp"
#include "actors/stage.hpp"
#include "ops/elementwise.hpp"
#include "ops/reduce.hpp"

int main() {
  af::runtime rt;
  int64_t next = 0;
  auto squares = af::pipeline::from_generator(
                     "numbers",
                     [&next]() -> af::expected<std::optional<af::element>> {
                       if (next == 5) return std::optional<af::element>{};  // end of stream
                       auto x = af::tensor::full({4}, static_cast<double>(next++), af::dtype::f32);
                       if (!x) return x.error_value();
                       return std::optional<af::element>{af::element{{"x", *x}}};
                     },
                     {.slots = 2})
                     .transform("square", [](af::element e) -> af::expected<std::vector<af::element>> {
                       const af::tensor& x = *e.find("x");
                       AF_TRY_ASSIGN(af::tensor y, af::mul(x, x));
                       AF_TRY_ASSIGN(af::tensor total, af::reduce_sum(y));
                       e.set("sum_of_squares", total);
                       return std::vector<af::element>{std::move(e)};
                     });

  auto stream = af::iterate(rt, squares);
  for (auto& e : stream)
    std::printf("x = %s, sum of squares = %g\n", e.find("x")->to_string().c_str(),
                e.find("sum_of_squares")->item<double>());
  if (stream.status()) {
    std::printf("pipeline failed: %s\n", stream.status().to_string().c_str());
    return 1;
  }
  return 0;
}
