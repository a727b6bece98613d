// A program built against an installed actorflow: the namespaced headers, the exported targets
// and their link dependencies must all work together for it to build, run and print "ok".
#include <actorflow/actors/runtime.hpp>
#include <actorflow/ops/linalg.hpp>
#include <actorflow/ops/tensor.hpp>
#include <actorflow/pipeline/dataset.hpp>
#include <actorflow/pipeline/iterator.hpp>

#include <cstdint>
#include <iostream>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::cerr << "install_consumer: FAILED: " << what << '\n';
    ++failures;
  }
}

void check_matmul() {
  auto a = af::tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = af::tensor::from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2});
  auto product = af::matmul(a, b);
  check(product.has_value(), "matmul of [2,3] x [3,2] succeeds");
  if (!product) return;
  check(product->shape() == af::shape{2, 2}, "matmul result has shape [2,2]");
  check(product->to_vector<float>() == std::vector<float>{58, 64, 139, 154}, "matmul numbers");
}

void check_pipeline() {
  af::runtime rt{{.scheduler_threads = 2}};
  auto labels = af::tensor::from_vector<int64_t>({10, 11, 12, 13, 14, 15, 16});
  auto doubled = [](af::element e) -> af::expected<af::element> {
    e.set("twice", af::tensor::scalar<int64_t>(2 * e.find("label")->item<int64_t>()));
    return e;
  };
  auto ds = af::data::dataset::from_tensor_slices({{"label", labels}}).map(doubled, 2).batch(3);
  std::vector<std::vector<int64_t>> batches;
  auto it = ds.iterate(rt);
  for (;;) {
    auto next = it.next();
    check(next.has_value(), "the pipeline runs without error");
    if (!next || !next->has_value()) break;
    batches.push_back((*next)->find("twice")->to_vector<int64_t>());
  }
  check(batches == std::vector<std::vector<int64_t>>{{20, 22, 24}, {26, 28, 30}, {32}},
        "from_tensor_slices + map + batch gives the doubled labels in batches of 3");
}

}  // namespace

int main() {
  check_matmul();
  check_pipeline();
  if (failures != 0) return 1;
  std::cout << "install_consumer: ok\n";
  return 0;
}
