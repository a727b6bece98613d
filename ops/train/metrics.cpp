#include "ops/train/metrics.hpp"

#include <algorithm>
#include <cmath>

#include "ops/elementwise.hpp"

namespace af::metrics {

namespace {

// Any numeric tensor as doubles, in row-major order.
expected<std::vector<double>> values_of(const tensor& t) {
  AF_TRY_ASSIGN(auto as_f64, cast(t, dtype::f64));
  return as_f64.to_vector<double>();
}

error bad(const std::string& metric, const std::string& why) {
  return make_error(errc::invalid_argument, "metric '" + metric + "': " + why);
}

class mean_metric final : public metric {
 public:
  explicit mean_metric(std::string name) : metric(std::move(name)) {}
  expected<void> update(const tensor&, const tensor& values) override {
    AF_TRY_ASSIGN(auto v, values_of(values));
    for (double x : v) sum_ += x;
    count_ += static_cast<double>(v.size());
    return {};
  }
  double result() const override { return count_ > 0 ? sum_ / count_ : 0.0; }
  void reset() override { sum_ = count_ = 0; }

 private:
  double sum_ = 0, count_ = 0;
};

// A fraction of items counted right, kept over batches.
class fraction_metric : public metric {
 public:
  double result() const override { return seen_ > 0 ? right_ / seen_ : 0.0; }
  void reset() override { right_ = seen_ = 0; }

 protected:
  using metric::metric;
  double right_ = 0, seen_ = 0;
};

// Labels [N] and scores [N, C]: for each row, how many classes score above the label's (ties with
// a lower class index count as above, as argmax picks the first).
class rank_metric final : public fraction_metric {
 public:
  rank_metric(std::string name, int k) : fraction_metric(std::move(name)), k_(k) {}
  expected<void> update(const tensor& labels, const tensor& scores) override {
    if (scores.shape().size() != 2 || labels.shape().size() != 1 || labels.shape()[0] != scores.shape()[0])
      return bad(name(), "needs labels [N] and scores [N, classes], got " + to_string(labels.shape()) + " and " +
                             to_string(scores.shape()));
    if (!is_integral(labels.type())) return bad(name(), "labels must be integer class ids");
    AF_TRY_ASSIGN(auto y, values_of(labels));
    AF_TRY_ASSIGN(auto s, values_of(scores));
    const auto n = static_cast<std::size_t>(scores.shape()[0]), classes = static_cast<std::size_t>(scores.shape()[1]);
    for (std::size_t i = 0; i < n; ++i)
      if (y[i] < 0 || y[i] >= static_cast<double>(classes))
        return bad(name(), "label " + std::to_string(static_cast<int64_t>(y[i])) + " at row " + std::to_string(i) +
                               " is outside [0, " + std::to_string(classes) + ")");
    for (std::size_t i = 0; i < n; ++i) {
      const auto label = static_cast<std::size_t>(y[i]);
      const double mine = s[i * classes + label];
      std::size_t above = 0;
      for (std::size_t c = 0; c < classes; ++c) {
        const double other = s[i * classes + c];
        if (other > mine || (other == mine && c < label)) ++above;
      }
      right_ += above < static_cast<std::size_t>(k_) ? 1 : 0;
    }
    seen_ += static_cast<double>(n);
    return {};
  }

 private:
  int k_;
};

// Targets {0, 1} and probabilities of one shape, checked the same way by both binary metrics.
expected<std::pair<std::vector<double>, std::vector<double>>> binary_pairs(const std::string& name, const tensor& targets,
                                                                           const tensor& probabilities) {
  if (targets.shape() != probabilities.shape())
    return bad(name, "targets " + to_string(targets.shape()) + " and probabilities " + to_string(probabilities.shape()) +
                         " differ in shape");
  AF_TRY_ASSIGN(auto y, values_of(targets));
  AF_TRY_ASSIGN(auto p, values_of(probabilities));
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i] != 0.0 && y[i] != 1.0)
      return bad(name, "target " + std::to_string(y[i]) + " at element " + std::to_string(i) + " is not 0 or 1");
  return std::pair{std::move(y), std::move(p)};
}

class binary_accuracy_metric final : public fraction_metric {
 public:
  binary_accuracy_metric(std::string name, double threshold) : fraction_metric(std::move(name)), threshold_(threshold) {}
  expected<void> update(const tensor& targets, const tensor& probabilities) override {
    AF_TRY_ASSIGN(auto pairs, binary_pairs(name(), targets, probabilities));
    const auto& [y, p] = pairs;
    for (std::size_t i = 0; i < y.size(); ++i) right_ += (p[i] > threshold_) == (y[i] == 1.0) ? 1 : 0;
    seen_ += static_cast<double>(y.size());
    return {};
  }

 private:
  double threshold_;
};

// Histograms of positives and negatives by how many cut points lie below each probability; the
// counts above cut point j are then suffix sums.
class auc_metric final : public metric {
 public:
  auc_metric(std::string name, int thresholds)
      : metric(std::move(name)), cuts_(std::max(thresholds, 3)),
        positives_(static_cast<std::size_t>(cuts_) + 1, 0.0), negatives_(static_cast<std::size_t>(cuts_) + 1, 0.0) {}
  expected<void> update(const tensor& targets, const tensor& probabilities) override {
    AF_TRY_ASSIGN(auto pairs, binary_pairs(name(), targets, probabilities));
    const auto& [y, p] = pairs;
    for (std::size_t i = 0; i < y.size(); ++i) {
      // Cut points at j / (cuts - 1), the first just below 0 and the last just above 1 (Keras').
      const double clamped = std::clamp(std::isnan(p[i]) ? 0.0 : p[i], 0.0, 1.0);
      const auto below = static_cast<std::size_t>(std::ceil(clamped * (cuts_ - 1)));  // cut points < p
      (y[i] == 1.0 ? positives_ : negatives_)[std::min(below, static_cast<std::size_t>(cuts_ - 1))] += 1;
    }
    return {};
  }
  double result() const override {
    double total_pos = 0, total_neg = 0;
    for (std::size_t j = 0; j < positives_.size(); ++j) {
      total_pos += positives_[j];
      total_neg += negatives_[j];
    }
    if (total_pos == 0 || total_neg == 0) return 0.0;
    // Walk the cut points from 1 down to 0: true/false positive rates grow from (0, 0) to (1, 1).
    double area = 0, tp = 0, fp = 0;
    for (std::size_t j = positives_.size(); j-- > 0;) {
      const double tpr_before = tp / total_pos, fpr_before = fp / total_neg;
      tp += positives_[j];
      fp += negatives_[j];
      area += (fp / total_neg - fpr_before) * (tp / total_pos + tpr_before) / 2;
    }
    return area;
  }
  void reset() override {
    std::fill(positives_.begin(), positives_.end(), 0.0);
    std::fill(negatives_.begin(), negatives_.end(), 0.0);
  }

 private:
  int cuts_;
  std::vector<double> positives_, negatives_;
};

}  // namespace

std::unique_ptr<metric> mean(std::string name) { return std::make_unique<mean_metric>(std::move(name)); }
std::unique_ptr<metric> sparse_categorical_accuracy(std::string name) {
  return std::make_unique<rank_metric>(std::move(name), 1);
}
std::unique_ptr<metric> sparse_top_k_accuracy(int k, std::string name) {
  return std::make_unique<rank_metric>(std::move(name), std::max(k, 1));
}
std::unique_ptr<metric> binary_accuracy(double threshold, std::string name) {
  return std::make_unique<binary_accuracy_metric>(std::move(name), threshold);
}
std::unique_ptr<metric> auc(int thresholds, std::string name) {
  return std::make_unique<auc_metric>(std::move(name), thresholds);
}

}  // namespace af::metrics
