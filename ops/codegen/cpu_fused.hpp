#pragma once

// A fused program on the CPU: one pass over memory. The output is cut into chunks that fit in L1;
// for each chunk every step runs as a tight loop over the chunk (vectorised by the compiler), so
// intermediate values never leave the cache and no intermediate tensor is allocated. Chunks run in
// parallel on the kernel threads.

#include <vector>

#include "ops/graph/fused_program.hpp"
#include "ops/tensor.hpp"

namespace af::codegen {

/// Runs `program` on `inputs` (types as the program's, unknown dims resolved from the tensors;
/// inputs broadcast to the output shape). shape_mismatch / dtype_mismatch naming the input.
/// `reuse`, when given, is an input nobody else holds any more: if it has the output's dtype and
/// shape the result is written into it (each element is read before it is overwritten).
expected<tensor> run_fused_cpu(const graph::fused_program& program, const std::vector<tensor>& inputs,
                               const tensor* reuse = nullptr);

/// How many loops over each chunk `program` runs when the inputs flagged in `single` are single
/// values: multiplies and adds by a single value fold into the loops of the unary steps around
/// them (gelu(x*a + b)*c is one loop). unsupported for an op the CPU kernels lack.
expected<std::size_t> cpu_loop_count(const graph::fused_program& program, const std::vector<bool>& single);

}  // namespace af::codegen
