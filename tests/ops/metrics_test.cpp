// Streaming metrics: results over several batches against counts worked out by hand or, for AUC,
// against the exact pairwise area; bad batches are errors that leave the state alone.

#include <catch2/catch.hpp>

#include <random>

#include "ops/train/metrics.hpp"

using namespace af;

namespace {

tensor scores(std::vector<float> v, int64_t rows) {
  return tensor::from_vector<float>(v, {rows, static_cast<int64_t>(v.size()) / rows});
}

}  // namespace

TEST_CASE("mean weighs each batch by its size", "[train][metrics]") {
  auto m = metrics::mean();
  REQUIRE(m->update({}, tensor::from_vector<float>({1, 2, 3})));
  REQUIRE(m->update({}, tensor::scalar(4.0f)));
  CHECK(m->result() == Approx(2.5));
  m->reset();
  CHECK(m->result() == 0.0);
}

TEST_CASE("accuracy and top-k accuracy count ranks, ties going to the lower class", "[train][metrics]") {
  auto top1 = metrics::sparse_categorical_accuracy();
  auto top2 = metrics::sparse_top_k_accuracy(2);
  // Row 0: label 2 highest. Row 1: label 0 second. Row 2: label 1 ties class 0 (argmax picks 0).
  const auto s = scores({0.1f, 0.2f, 0.9f, 0.5f, 0.7f, 0.1f, 0.4f, 0.4f, 0.2f}, 3);
  const auto y = tensor::from_vector<int64_t>({2, 0, 1});
  REQUIRE(top1->update(y, s));
  REQUIRE(top2->update(y, s));
  CHECK(top1->result() == Approx(1.0 / 3));
  CHECK(top2->result() == Approx(1.0));
  REQUIRE(top1->update(tensor::from_vector<int32_t>({0}), scores({3.0f, 1.0f, 2.0f}, 1)));
  CHECK(top1->result() == Approx(2.0 / 4));
}

TEST_CASE("a bad batch is an error naming the metric and the row, and changes nothing", "[train][metrics]") {
  auto acc = metrics::sparse_categorical_accuracy();
  REQUIRE(acc->update(tensor::from_vector<int64_t>({1}), scores({0.0f, 1.0f}, 1)));
  auto out_of_range = acc->update(tensor::from_vector<int64_t>({0, 5}), scores({1, 0, 1, 0}, 2));
  REQUIRE_FALSE(out_of_range);
  CHECK(out_of_range.error_value().message == "metric 'accuracy': label 5 at row 1 is outside [0, 2)");
  CHECK_FALSE(acc->update(tensor::from_vector<float>({0}), scores({1, 0}, 1)));  // float labels
  CHECK_FALSE(acc->update(tensor::from_vector<int64_t>({0, 1}), scores({1, 0}, 1)));  // rows differ
  CHECK(acc->result() == 1.0);
  auto binary = metrics::binary_accuracy();
  auto not_binary = binary->update(tensor::from_vector<float>({0, 2}), tensor::from_vector<float>({0.1f, 0.9f}));
  REQUIRE_FALSE(not_binary);
  CHECK(not_binary.error_value().message.find("element 1 is not 0 or 1") != std::string::npos);
}

TEST_CASE("binary accuracy thresholds the probabilities", "[train][metrics]") {
  auto m = metrics::binary_accuracy(0.5);
  REQUIRE(m->update(tensor::from_vector<float>({1, 0, 1, 0}), tensor::from_vector<float>({0.9f, 0.2f, 0.4f, 0.6f})));
  CHECK(m->result() == Approx(0.5));
}

TEST_CASE("AUC matches the exact pairwise area within the threshold grid's resolution", "[train][metrics]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.25f);
  std::vector<float> y, p;
  for (int i = 0; i < 4000; ++i) {
    const bool positive = i % 3 == 0;
    y.push_back(positive ? 1.0f : 0.0f);
    p.push_back(std::clamp((positive ? 0.6f : 0.4f) + noise(rng), 0.0f, 1.0f));
  }
  double exact = 0, pairs = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    for (std::size_t j = 0; j < y.size(); ++j)
      if (y[i] == 1 && y[j] == 0) {
        exact += p[i] > p[j] ? 1.0 : p[i] == p[j] ? 0.5 : 0.0;
        pairs += 1;
      }
  exact /= pairs;
  auto m = metrics::auc();
  // Two batches: the state accumulates.
  const std::size_t half = y.size() / 2;
  REQUIRE(m->update(tensor::from_vector<float>({y.begin(), y.begin() + half}), tensor::from_vector<float>({p.begin(), p.begin() + half})));
  REQUIRE(m->update(tensor::from_vector<float>({y.begin() + half, y.end()}), tensor::from_vector<float>({p.begin() + half, p.end()})));
  CHECK(m->result() == Approx(exact).margin(0.005));
  auto perfect = metrics::auc();
  REQUIRE(perfect->update(tensor::from_vector<float>({0, 0, 1, 1}), tensor::from_vector<float>({0.1f, 0.3f, 0.7f, 0.9f})));
  CHECK(perfect->result() == Approx(1.0));
  auto reversed = metrics::auc();
  REQUIRE(reversed->update(tensor::from_vector<float>({1, 1, 0, 0}), tensor::from_vector<float>({0.1f, 0.3f, 0.7f, 0.9f})));
  CHECK(reversed->result() == Approx(0.0));
}
