#pragma once

// The per-epoch progress display of fit and evaluate: a bar redrawn in place on a terminal
// ("12/45 [=====>......] - ETA: 3s - loss: 0.4123 - accuracy: 0.8812 - 9512 samples/s"),
// one plain line per epoch otherwise.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "training/trainer.hpp"

namespace af::train {

class progress_display {
 public:
  /// `total` batches (0: unknown yet); a bar only when `bar` (the output is a terminal).
  progress_display(std::FILE* out, bool bar, int64_t total);
  /// After each batch: the batches done, the samples seen and the running figures.
  void update(int64_t batches, int64_t samples, const logs& figures);
  /// The epoch's closing line with every figure (validation ones included).
  void finish(int64_t batches, int64_t samples, const logs& figures);

 private:
  std::string figures_text(const logs& figures) const;
  std::FILE* out_;
  bool bar_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

/// Whether `out` is a terminal (a bar then redraws in place).
bool is_terminal(std::FILE* out);

}  // namespace af::train
