#pragma once

// bench_loadgen (built beside the calling program) run as a process of its own: a server measured in
// this process then owns its RSS alone, while the generator's queue and latency records, which grow
// with any backlog it meets, live in the child.

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace af::bench {

/// Runs bench_loadgen with `args`, calling `tick` about every 100 ms until it exits. Its JSON last
/// line, or nullopt (with the reason on stderr) when it could not start or failed.
std::optional<std::string> run_loadgen_process(const std::vector<std::string>& args, const std::function<void()>& tick);

/// The number after "key": in a JSON line of numbers; NaN when the key is absent.
double json_number(const std::string& line, const std::string& key);

}  // namespace af::bench
