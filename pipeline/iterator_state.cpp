// The checkpoint form of an iterator's position: a text header any editor shows (seed, elements
// handed out, the pipeline's description), then the stages' state in binary (state_codec.hpp).
// Version 1 (header only: every resume replayed) is still read.

#include <cstring>
#include <string>

#include "pipeline/iterator.hpp"
#include "pipeline/state_codec.hpp"

namespace af::data {

namespace {

constexpr std::string_view magic_v1 = "actorflow-iterator-state 1\n";
constexpr std::string_view magic_v2 = "actorflow-iterator-state 2\n";

error bad(const std::string& what) { return make_error(errc::malformed_input, "iterator state: " + what); }

// Chains nest inside stages (an interleave's input and children); a damaged state cannot make
// the reader recurse without bound.
constexpr int max_nesting = 32;

expected<void> put_chain(state_writer& out, const chain_snapshot& chain) {
  out.u64(chain.upstream_ended ? 1 : 0);
  out.u64(chain.stages.size());
  for (const auto& stage : chain.stages) {
    out.bytes(stage.stage);
    out.bytes(stage.data);
    out.u64(stage.held.size());
    for (const auto& e : stage.held) AF_TRY(out.put(e));
    out.u64(stage.nested.size());
    for (const auto& inner : stage.nested) AF_TRY(put_chain(out, inner));
  }
  return {};
}

expected<void> put_stages(state_writer& out, const iterator_state& s) {
  AF_TRY(put_chain(out, *s.stages));
  out.u64(s.pending.size());
  for (const auto& e : s.pending) AF_TRY(out.put(e));
  return {};
}

expected<chain_snapshot> get_chain(state_reader& in, int depth) {
  if (depth > max_nesting) return bad("chains nest deeper than " + std::to_string(max_nesting));
  chain_snapshot chain;
  AF_TRY_ASSIGN(uint64_t ended, in.u64("upstream ended"));
  AF_TRY_ASSIGN(uint64_t count, in.u64("stage count"));
  chain.upstream_ended = ended != 0;
  for (uint64_t i = 0; i < count && !in.empty(); ++i) {
    stage_state stage;
    AF_TRY_ASSIGN(stage.stage, in.bytes("stage name"));
    AF_TRY_ASSIGN(stage.data, in.bytes("stage data"));
    AF_TRY_ASSIGN(uint64_t held, in.u64("held elements"));
    for (uint64_t k = 0; k < held; ++k) {
      AF_TRY_ASSIGN(element e, in.get_element("a held element"));
      stage.held.push_back(std::move(e));
    }
    AF_TRY_ASSIGN(uint64_t nested, in.u64("nested chains"));
    for (uint64_t k = 0; k < nested; ++k) {
      AF_TRY_ASSIGN(auto inner, get_chain(in, depth + 1));
      stage.nested.push_back(std::move(inner));
    }
    chain.stages.push_back(std::move(stage));
  }
  if (chain.stages.size() != count) return bad("ends after " + std::to_string(chain.stages.size()) + " of " + std::to_string(count) + " stages");
  return chain;
}

expected<void> get_stages(state_reader& in, iterator_state& s) {
  AF_TRY_ASSIGN(auto chain, get_chain(in, 0));
  AF_TRY_ASSIGN(uint64_t pending, in.u64("pending elements"));
  for (uint64_t k = 0; k < pending; ++k) {
    AF_TRY_ASSIGN(element e, in.get_element("a pending element"));
    s.pending.push_back(std::move(e));
  }
  s.stages = std::move(chain);
  return {};
}

}  // namespace

std::string iterator_state::serialize() const {
  std::string out = std::string{magic_v2} + "base_seed " + std::to_string(base_seed) + "\nconsumed " +
                    std::to_string(consumed) + "\nfingerprint " + std::to_string(fingerprint.size()) + "\n" + fingerprint;
  state_writer w{out};
  const std::size_t mark = out.size();
  w.bytes(replay_reason);
  w.u64(stages ? 1 : 0);
  if (stages && !put_stages(w, *this)) {
    // An element that cannot be made contiguous (out of memory): the position stays exact, as a
    // replay of `consumed` elements.
    out.resize(mark);
    w.bytes("the saved elements could not be encoded (out of memory)");
    w.u64(0);
  }
  return out;
}

expected<iterator_state> iterator_state::deserialize(std::string_view text) {
  const char* const start = text.data();
  const bool v1 = text.substr(0, magic_v1.size()) == magic_v1;
  if (!v1 && text.substr(0, magic_v2.size()) != magic_v2)
    return bad("does not start with '" + std::string{magic_v2.substr(0, magic_v2.size() - 1)} + "'");
  text.remove_prefix(magic_v2.size());
  iterator_state out;
  auto read_number = [&](std::string_view key, uint64_t& value) -> expected<void> {
    const std::string prefix = std::string{key} + " ";
    const auto eol = text.find('\n');
    if (text.substr(0, prefix.size()) != prefix || eol == std::string_view::npos)
      return bad("expected a line '" + std::string{key} + " <number>'");
    const std::string digits{text.substr(prefix.size(), eol - prefix.size())};
    if (digits.empty() || digits.size() > 20 || digits.find_first_not_of("0123456789") != std::string::npos)
      return bad(std::string{"'"}.append(key).append("' is not a number: '").append(digits).append("'"));
    value = std::stoull(digits);
    text.remove_prefix(eol + 1);
    return {};
  };
  uint64_t length = 0;
  AF_TRY(read_number("base_seed", out.base_seed));
  AF_TRY(read_number("consumed", out.consumed));
  AF_TRY(read_number("fingerprint", length));
  if (v1 ? text.size() != length : text.size() < length)
    return bad("fingerprint has " + std::to_string(text.size()) + " bytes, header says " + std::to_string(length));
  out.fingerprint = std::string{text.substr(0, static_cast<std::size_t>(length))};
  if (v1) {
    out.replay_reason = "saved by version 1, which saved no stage state";
    return out;
  }
  // One aligned copy of the whole state; restored elements are views of it.
  const std::size_t header_bytes = static_cast<std::size_t>(text.data() - start) + static_cast<std::size_t>(length);
  const std::size_t total = header_bytes + (text.size() - static_cast<std::size_t>(length));
  AF_TRY_ASSIGN(tensor whole, tensor::empty(shape{static_cast<int64_t>(total)}, dtype::u8));
  std::memcpy(whole.raw_data(), start, total);
  const std::string_view copy{static_cast<const char*>(whole.raw_data()), total};
  state_reader in{copy.substr(header_bytes), "the pipeline", whole};
  AF_TRY_ASSIGN(out.replay_reason, in.bytes("replay reason"));
  AF_TRY_ASSIGN(uint64_t has_stages, in.u64("has stages"));
  if (has_stages) AF_TRY(get_stages(in, out));
  AF_TRY(in.done());
  return out;
}

}  // namespace af::data
