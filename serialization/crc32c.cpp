#include "serialization/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <nmmintrin.h>
#define AF_CRC32C_X86 1
#endif

namespace af {

namespace {

constexpr uint32_t poly = 0x82F63B78u;  // reflected Castagnoli polynomial

// tables[k][b] is the CRC contribution of byte b followed by k zero bytes, so eight table
// look-ups advance the CRC over eight input bytes at once (slicing-by-8).
using slice_tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr slice_tables make_tables() {
  slice_tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  return t;
}

constexpr slice_tables tables = make_tables();

uint32_t load_le32(const unsigned char* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, 4);  // the hosts we build for are little-endian (x86-64, aarch64)
  return v;
}

// Works on the inverted register: callers do the ~ on entry and exit.
uint32_t table_update(uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  while (n >= 8) {
    uint32_t lo = load_le32(p) ^ crc;
    uint32_t hi = load_le32(p + 4);
    crc = tables[7][lo & 0xff] ^ tables[6][(lo >> 8) & 0xff] ^ tables[5][(lo >> 16) & 0xff] ^
          tables[4][lo >> 24] ^ tables[3][hi & 0xff] ^ tables[2][(hi >> 8) & 0xff] ^
          tables[1][(hi >> 16) & 0xff] ^ tables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ tables[0][(crc ^ *p++) & 0xff];
  return crc;
}

#ifdef AF_CRC32C_X86
// One crc32 instruction per 8 bytes. The function carries its own target attribute so the rest
// of the library builds for baseline x86-64 and still runs on CPUs without SSE4.2.
__attribute__((target("sse4.2"))) uint32_t hardware_update(uint32_t crc, const unsigned char* p,
                                                           std::size_t n) noexcept {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool cpu_has_sse42() noexcept {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t crc32c_portable(const void* data, std::size_t n, uint32_t init) noexcept {
  return ~table_update(~init, static_cast<const unsigned char*>(data), n);
}

uint32_t crc32c(const void* data, std::size_t n, uint32_t init) noexcept {
#ifdef AF_CRC32C_X86
  if (cpu_has_sse42()) return ~hardware_update(~init, static_cast<const unsigned char*>(data), n);
#endif
  return crc32c_portable(data, n, init);
}

bool crc32c_is_hardware_accelerated() noexcept {
#ifdef AF_CRC32C_X86
  return cpu_has_sse42();
#else
  return false;
#endif
}

}  // namespace af
