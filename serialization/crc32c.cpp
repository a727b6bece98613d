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
__attribute__((target("sse4.2"))) uint32_t hardware_serial(uint32_t crc, const unsigned char* p,
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

// The crc32 instruction has a latency of about 3 cycles but a throughput of one per cycle, so one
// dependent chain uses a third of it. Three blocks are checksummed side by side and joined: the
// register update is linear, so reg(A‖B, s) = shift(reg(A, s)) ^ reg(B, 0), where shift advances
// a register over `block` zero bytes — a fixed linear map, applied with four table look-ups.
constexpr std::size_t block = 256;

struct shift_table {
  std::array<std::array<uint32_t, 256>, 4> t{};
  uint32_t operator()(uint32_t c) const noexcept {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
  }
};

const shift_table& block_shift() {
  static const shift_table table = [] {
    shift_table s;
    const unsigned char zeros[block] = {};
    uint32_t basis[32];  // the map's image of each single-bit register
    for (int bit = 0; bit < 32; ++bit) basis[bit] = hardware_serial(uint32_t{1} << bit, zeros, block);
    for (int k = 0; k < 4; ++k)
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j)
          if (b & (1u << j)) v ^= basis[8 * k + j];
        s.t[k][b] = v;
      }
    return s;
  }();
  return table;
}

__attribute__((target("sse4.2"))) uint32_t hardware_update(uint32_t crc, const unsigned char* p,
                                                           std::size_t n) noexcept {
  if (n >= 3 * block) {
    const shift_table& shift = block_shift();
    do {
      uint64_t c0 = crc, c1 = 0, c2 = 0;
      for (std::size_t i = 0; i < block; i += 8) {
        uint64_t v0, v1, v2;
        std::memcpy(&v0, p + i, 8);
        std::memcpy(&v1, p + block + i, 8);
        std::memcpy(&v2, p + 2 * block + i, 8);
        c0 = _mm_crc32_u64(c0, v0);
        c1 = _mm_crc32_u64(c1, v1);
        c2 = _mm_crc32_u64(c2, v2);
      }
      crc = shift(shift(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1)) ^ static_cast<uint32_t>(c2);
      p += 3 * block;
      n -= 3 * block;
    } while (n >= 3 * block);
  }
  return hardware_serial(crc, p, n);
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
