#pragma once

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord, LevelDB and
// iSCSI. The x86 SSE4.2 `crc32` instruction computes it directly; a slicing-by-8 table handles
// every other CPU. Which path runs is decided once, at first use, from a CPUID check.

#include <cstddef>
#include <cstdint>

namespace af {

/// CRC32C of `n` bytes at `data`. Extendable: `crc32c(b, nb, crc32c(a, na))` equals the CRC32C of
/// the concatenation a+b; `init = 0` starts a fresh checksum.
uint32_t crc32c(const void* data, std::size_t n, uint32_t init = 0) noexcept;

/// The portable slicing-by-8 path, whatever the CPU (tests compare it against the fast path).
uint32_t crc32c_portable(const void* data, std::size_t n, uint32_t init = 0) noexcept;

/// True when crc32c() uses the SSE4.2 instruction on this CPU.
bool crc32c_is_hardware_accelerated() noexcept;

/// TFRecord stores CRCs "masked" (rotated and offset) because a CRC over data that itself embeds
/// CRCs is weak; this is TensorFlow's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
constexpr uint32_t mask_crc32c(uint32_t crc) noexcept {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
/// Inverse of mask_crc32c.
constexpr uint32_t unmask_crc32c(uint32_t masked) noexcept {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}
/// mask_crc32c(crc32c(data, n)): the value a TFRecord stores for these bytes.
inline uint32_t masked_crc32c(const void* data, std::size_t n) noexcept {
  return mask_crc32c(crc32c(data, n));
}

}  // namespace af
