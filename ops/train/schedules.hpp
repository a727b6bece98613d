#pragma once

// Learning-rate schedules: the learning rate for an update count, as tf.keras.optimizers.schedules
// defines them. The training loop evaluates one per step and feeds the result to the traced step
// as an input (optimizer::apply), so a schedule never causes a retrace.

#include <cstdint>
#include <functional>

namespace af::schedules {

/// Learning rate for the number of updates already done (0 for the first).
using schedule = std::function<double(int64_t updates_done)>;

schedule constant(double learning_rate);

/// initial * rate^(step / decay_steps); with `staircase` the exponent is floored.
schedule exponential_decay(double initial, int64_t decay_steps, double rate, bool staircase = false);

/// Cosine from `initial` down to initial * alpha over decay_steps, then flat.
schedule cosine_decay(double initial, int64_t decay_steps, double alpha = 0.0);

/// SGDR: cosine decays restarting after first_decay_steps, each period t_mul times longer and each
/// restart m_mul times lower.
schedule cosine_decay_restarts(double initial, int64_t first_decay_steps, double t_mul = 2.0, double m_mul = 1.0,
                               double alpha = 0.0);

/// Rises linearly from `from` to after(0) over warmup_steps, then follows after(step - warmup_steps).
schedule linear_warmup(schedule after, int64_t warmup_steps, double from = 0.0);

}  // namespace af::schedules
