#include "apps/serving/warmup.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

#include "apps/serving/warmup_records.hpp"

namespace af::serving {

namespace {

// Zeros for every input with `rows` rows; open dims after the rows get 1.
expected<std::vector<tensor>> zero_batch(const graph::signature& signature, int64_t rows) {
  std::vector<tensor> out;
  for (const auto& spec : signature.inputs) {
    shape dims = spec.type.dims;
    if (dims.empty()) return make_error(errc::invalid_argument, "input '" + spec.name + "' has no batch dimension");
    dims[0] = rows;
    for (std::size_t d = 1; d < dims.size(); ++d)
      if (dims[d] < 0) dims[d] = 1;
    AF_TRY_ASSIGN(auto zeros, tensor::zeros(dims, spec.type.type));
    out.push_back(std::move(zeros));
  }
  return out;
}

}  // namespace

expected<void> warm_up(const std::string& version_dir, const graph::signature& signature, const batching_queue& queue,
                       const batching_options& options) {
  const auto records = std::filesystem::path{version_dir} / warmup_records_path;
  std::error_code ec;
  if (std::filesystem::exists(records, ec)) {
    AF_TRY_ASSIGN(auto requests, read_warmup_requests(records.string(), signature));
    for (auto& inputs : requests) AF_TRY(queue.predict(std::move(inputs)));
    return {};
  }
  std::set<std::size_t> sizes{1};
  if (options.join_requests) {
    sizes.insert(options.allowed_batch_sizes.begin(), options.allowed_batch_sizes.end());
    sizes.insert(options.max_batch_size);
  }
  for (std::size_t rows : sizes) {
    AF_TRY_ASSIGN(auto inputs, zero_batch(signature, static_cast<int64_t>(rows)));
    AF_TRY(queue.predict(std::move(inputs)));
  }
  return {};
}

}  // namespace af::serving
