// Differential fuzzing of decode_example against libprotobuf on TensorFlow's schema (example.proto
// here): both must accept the same bytes and, when they do, find the same features with the same
// values (bit for bit). A disagreement aborts with both results and the input in hex, unless the
// known differences in nesting limits and in how varints are read (below, each explained) account
// for it.
//
// libprotobuf parses each input twice: with TensorFlow's schema (map<string, Feature>) and with
// the same wire format whose keys are bytes (ExampleBytesKeys). The second is the reference for
// every rule; the first must agree with it except where a key field is not valid UTF-8, which
// proto3 rejects in a string field and decode_example accepts (a known, deliberate difference:
// names are bytes to us).

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/stubs/logging.h>

#include <map>
#include <string>

#include "example.pb.h"
#include "fuzz_support.hpp"
#include "serialization/example.hpp"

namespace {

using af::feature;
using af::feature_kind;
using af::fuzz::fail;
namespace pb = af_fuzz::tf;

std::string hex(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Why the two views of a Feature differ, or "" when they agree.
std::string compare_feature(const pb::Feature& theirs, const feature& ours) {
  const auto their_kind = static_cast<feature_kind>(theirs.kind_case());  // oneof cases = field numbers
  if (their_kind != ours.kind())
    return "kind " + std::string(af::to_string(their_kind)) + " vs ours " + std::string(af::to_string(ours.kind()));
  switch (their_kind) {
    case feature_kind::none: return {};
    case feature_kind::bytes_list: {
      const auto& a = theirs.bytes_list().value();
      const auto& b = std::get<1>(ours.values);
      if (static_cast<std::size_t>(a.size()) != b.size())
        return std::to_string(a.size()) + " bytes values vs ours " + std::to_string(b.size());
      for (int i = 0; i < a.size(); ++i)
        if (a[i] != b[static_cast<std::size_t>(i)]) return "bytes value " + std::to_string(i) + " differs";
      return {};
    }
    case feature_kind::float_list: {
      const auto& a = theirs.float_list().value();
      if (!af::fuzz::same_bits(std::vector<float>(a.begin(), a.end()), std::get<2>(ours.values)))
        return std::to_string(a.size()) + " floats vs ours " + std::to_string(std::get<2>(ours.values).size()) +
               " (or other bits)";
      return {};
    }
    case feature_kind::int64_list: {
      const auto& a = theirs.int64_list().value();
      if (std::vector<int64_t>(a.begin(), a.end()) != std::get<3>(ours.values))
        return std::to_string(a.size()) + " int64s vs ours " + std::to_string(std::get<3>(ours.values).size()) +
               " (or other values)";
      return {};
    }
  }
  return "unknown kind";
}

// Compares a feature map (name -> Feature, the last entry of a name having won) with ours.
template <class Map>
std::string compare(const Map& theirs, const af::example& ours) {
  if (theirs.size() != ours.features.size())
    return std::to_string(theirs.size()) + " features vs ours " + std::to_string(ours.features.size());
  for (const auto& [name, f] : theirs) {
    const feature* mine = ours.find(name);
    if (!mine) return "feature '" + name + "' missing from ours";
    if (std::string why = compare_feature(f, *mine); !why.empty()) return "feature '" + name + "': " + why;
  }
  return {};
}

// The map the bytes-keyed parse stands for: an entry's key is its last key field ("" without one),
// and the last entry of a key wins.
std::map<std::string, pb::Feature> last_entry_wins(const pb::ExampleBytesKeys& ex) {
  std::map<std::string, pb::Feature> out;
  for (const auto& entry : ex.features().feature())
    out[entry.key().empty() ? std::string() : *entry.key().rbegin()] = entry.value();
  return out;
}

// Whether any key field, replaced by a later one or not, is not UTF-8: the map rejects that.
bool any_key_invalid_utf8(const pb::ExampleBytesKeys& ex) {
  for (const auto& entry : ex.features().feature())
    for (const auto& key : entry.key())
      if (!google::protobuf::internal::IsStructurallyValidUTF8(key.data(), static_cast<int>(key.size()))) return true;
  return false;
}

// Why libprotobuf and decode_example disagree on `bytes`, or "" when they agree.
// libprotobuf's limit is `recursion_limit` nested messages and groups together.
std::string disagreement_on(std::string_view bytes, int recursion_limit) {
  auto parse = [&](google::protobuf::MessageLite& m) {
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                              static_cast<int>(bytes.size()));
    in.SetRecursionLimit(recursion_limit);
    return m.ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
  };
  pb::ExampleBytesKeys reference;
  const bool reference_ok = parse(reference);
  pb::Example tensorflow;
  const bool tensorflow_ok = parse(tensorflow);
  const auto ours = af::decode_example(bytes);
  if (reference_ok && !ours) return "libprotobuf accepts, decode_example rejects: " + ours.error_value().message;
  if (!reference_ok && ours) return "decode_example accepts, libprotobuf rejects";
  if (!reference_ok) return tensorflow_ok ? "libprotobuf accepts the string-keyed schema but not the bytes-keyed one" : "";
  if (std::string why = compare(last_entry_wins(reference), *ours); !why.empty()) return why;
  if (tensorflow_ok) {
    std::string why = compare(tensorflow.features().feature(), *ours);
    return why.empty() ? why : "with string keys: " + why;
  }
  return any_key_invalid_utf8(reference) ? "" : "libprotobuf rejects the string-keyed schema though every key is valid UTF-8";
}

// ---- known differences ---------------------------------------------------------------------------
// Nesting: libprotobuf allows 100 levels of messages and groups together (an Example's lists are 4
// messages deep, so 96 groups fit there); decode_example allows 100 levels of groups in every
// message. An input libprotobuf rejects only for that parses with a limit 4 levels higher.
constexpr int protobuf_recursion_limit = 100;
constexpr int example_message_depth = 4;  // Features, map entry, Feature, BytesList/FloatList/Int64List

bool explained_by_nesting_or_agrees(std::string_view bytes) {
  return disagreement_on(bytes, protobuf_recursion_limit).empty() ||
         disagreement_on(bytes, protobuf_recursion_limit + example_message_depth).empty();
}

// decode_example reads every varint as protobuf's encoding document describes it, up to 10 bytes
// holding at most 64 bits, and then checks the value (field numbers up to 2^29 - 1), as Go's
// protowire does. libprotobuf (C++) reads tags and lengths as at most 5 bytes, dropping bits
// beyond 32 of a tag, and keeps the low 64 bits of a 10-byte varint. The rewrites below take
// those encodings out of an input (wherever the bytes could be one, which may touch other bytes
// too, identically for both parsers); a disagreement that the rewritten input no longer shows was
// one of them.

// The 10th byte of a varint carries bit 63 and nothing above it: libprotobuf drops the higher
// bits of any 10th byte below 0x80, decode_example rejects the varint as overlong.
std::string without_varint_overflow(std::string_view bytes) {
  std::string out(bytes);
  for (std::size_t i = 0; i + 10 <= out.size(); ++i) {
    bool continued = true;
    for (std::size_t k = 0; k < 9; ++k) continued = continued && (static_cast<unsigned char>(out[i + k]) & 0x80);
    auto& last = reinterpret_cast<unsigned char&>(out[i + 9]);
    if (continued && last > 1 && last < 0x80) last &= 1;
  }
  return out;
}

// A 5-byte tag carries bits 28-34; a tag is 32 bits. libprotobuf drops bits 32-34 (so the field
// number wraps around), decode_example rejects the field number as beyond 2^29 - 1.
std::string without_tag_overflow(std::string_view bytes) {
  std::string out(bytes);
  for (std::size_t i = 0; i + 5 <= out.size(); ++i) {
    bool continued = true;
    for (std::size_t k = 0; k < 4; ++k) continued = continued && (static_cast<unsigned char>(out[i + k]) & 0x80);
    auto& last = reinterpret_cast<unsigned char&>(out[i + 4]);
    if (continued && last > 0x0f && last < 0x80) last &= 0x0f;
  }
  return out;
}

constexpr std::string (*known_rewrites[])(std::string_view) = {&without_varint_overflow, &without_tag_overflow};

// A tag or length written in 6 to 10 bytes (padded with 0x80 bytes) is a valid varint to
// decode_example and too long to libprotobuf, which gives up after 5 bytes. No rewrite keeps the
// message lengths around it right, so an input holding a varint of 6+ bytes anywhere is excused
// when decode_example accepts it and libprotobuf does not.
bool has_long_varint(std::string_view bytes) {
  std::size_t continued = 0;
  for (unsigned char b : bytes) {
    if (b < 0x80 && continued >= 5) return true;
    continued = b & 0x80 ? continued + 1 : 0;
  }
  return false;
}

// libprotobuf logs each UTF-8 rejection; at thousands of inputs a second that drowns the output.
void quiet(google::protobuf::LogLevel, const char*, int, const std::string&) {}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const bool silenced = (google::protobuf::SetLogHandler(&quiet), true);
  (void)silenced;
  const std::string_view bytes = af::fuzz::as_chars(data, size);
  const std::string disagreement = disagreement_on(bytes, protobuf_recursion_limit);
  if (disagreement.empty() || explained_by_nesting_or_agrees(bytes)) return 0;
  std::string rewritten(bytes);
  for (auto rewrite : known_rewrites) {
    std::string next = rewrite(rewritten);
    if (next == rewritten) continue;
    rewritten = std::move(next);
    if (explained_by_nesting_or_agrees(rewritten)) return 0;  // explained by the known differences so far
  }
  if (disagreement.rfind("decode_example accepts", 0) == 0 && has_long_varint(bytes)) return 0;
  fail("decode_example and libprotobuf disagree: " + disagreement + "\n  input (" + std::to_string(size) +
       " bytes): " + hex(bytes.substr(0, 512)));
}
