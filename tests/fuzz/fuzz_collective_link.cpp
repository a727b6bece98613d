// Fuzzes what a collective ring reads from another process (actors/collective_link.hpp): a stream
// of messages, each a 72-byte header checked by read_header against the group, then its payload,
// read as the ring's link reader does (a chunk into a tensor of the header's elements, an abort's
// text into a string). The group is 4 ranks in 2 processes; this is process 0 hearing process 1.
//
// Invariants: a refused header is malformed_input naming the process; an accepted chunk names a
// rank of this process as its target and one of the peer's as its sender, a known operation and a
// numeric element type, whole elements, at most one rank's input of them and at most the byte
// limit, so its allocation is bounded before any byte of payload is read; an accepted abort's text
// is at most max_abort_text bytes.

#include <cstring>
#include <string>

#include "actors/collective_link.hpp"
#include "fuzz_support.hpp"
#include "ops/tensor.hpp"

namespace {

using namespace af::collectives;

constexpr uint64_t max_payload = uint64_t{1} << 20;

// A link whose peer's bytes are the fuzzer's input.
class input_link final : public mesh::link {
 public:
  explicit input_link(std::string_view bytes) : rest_(bytes) { peer_process = 1; }
  af::expected<void> write(const mesh::wire_header&, const void*) override { return {}; }
  af::expected<void> read(void* out, std::size_t n) override {
    if (rest_.size() < n) return af::make_error(af::errc::peer_down, "end of input");
    std::memcpy(out, rest_.data(), n);
    rest_.remove_prefix(n);
    return {};
  }
  void close_writing() override {}
  void shorten_stall(std::chrono::milliseconds) override {}
  void stop_reading() override {}
  const char* transport() const override { return "fuzz input"; }

 private:
  std::string_view rest_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  input_link link{af::fuzz::as_chars(data, size)};
  const mesh::group_shape group{4, 2, 0};
  for (;;) {
    auto header = mesh::read_header(link, group, max_payload);
    if (!header) {
      const auto& e = header.error_value();
      if (e.code == af::errc::peer_down) return 0;  // the input ended
      AF_FUZZ_CHECK(e.code == af::errc::malformed_input, "read_header failed with " + e.to_string());
      AF_FUZZ_CHECK(e.message.find("process 1") != std::string::npos, "a refusal does not name the process: " + e.message);
      return 0;
    }
    const auto& h = *header;
    AF_FUZZ_CHECK(h.to_rank == 0 || h.to_rank == 1, "accepted to_rank " + std::to_string(h.to_rank));
    AF_FUZZ_CHECK(h.from_rank == 2 || h.from_rank == 3, "accepted from_rank " + std::to_string(h.from_rank));
    if (h.type == static_cast<uint16_t>(mesh::message_type::bye)) {
      AF_FUZZ_CHECK(h.payload_bytes == 0, "accepted a goodbye with a payload");
      return 0;  // the ring's reader stops here
    }
    if (h.type == static_cast<uint16_t>(mesh::message_type::abort)) {
      AF_FUZZ_CHECK(h.payload_bytes <= mesh::max_abort_text, "accepted an abort text of " + std::to_string(h.payload_bytes));
      std::string text(h.payload_bytes, '\0');
      if (!link.read(text.data(), text.size())) return 0;
      continue;
    }
    AF_FUZZ_CHECK(h.type == static_cast<uint16_t>(mesh::message_type::chunk), "accepted message type " + std::to_string(h.type));
    AF_FUZZ_CHECK(h.kind >= 0 && h.kind <= 3, "accepted operation " + std::to_string(h.kind));
    AF_FUZZ_CHECK(h.dtype >= 0 && h.dtype < static_cast<int32_t>(af::dtype::string), "accepted element type " + std::to_string(h.dtype));
    const auto type = static_cast<af::dtype>(h.dtype);
    const uint64_t elements = h.payload_bytes / af::size_of(type);
    AF_FUZZ_CHECK(h.payload_bytes <= max_payload && elements * af::size_of(type) == h.payload_bytes &&
                      elements <= static_cast<uint64_t>(h.numel),
                  "accepted a payload of " + std::to_string(h.payload_bytes) + " bytes for " + std::to_string(h.numel) + " elements");
    auto chunk = af::tensor::empty({static_cast<int64_t>(elements)}, type);
    if (!chunk) af::fuzz::fail("no tensor for an accepted chunk: " + chunk.error_value().to_string());
    if (h.payload_bytes > 0 && !link.read(chunk->raw_data(), h.payload_bytes)) return 0;
  }
}
