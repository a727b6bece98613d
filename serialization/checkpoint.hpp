#pragma once

// Training checkpoints: named tensors plus string metadata, one directory per checkpoint.
//
// Directory layout (every integer little-endian; CRCs are plain CRC32C, serialization/crc32c.hpp):
//   index     "AFCKIDX1" | u32 tensor_count | u64 data_bytes | per tensor: u32 name_len, name,
//             u8 dtype code (ops/dtype.hpp), u8 ndim, i64 dims[ndim], u64 offset, u64 nbytes,
//             u32 crc32c(tensor bytes) | u32 crc32c(every index byte before it)
//   data      the tensors' row-major bytes at their offsets (each a multiple of 64, zero padding
//             between), `data_bytes` long in all
//   metadata  "AFCKMET1" | u32 count | per entry: u64 key_len, key, u64 value_len, value |
//             u32 crc32c(every metadata byte before it)
// Tensors round-trip bit-exactly (NaN payloads included); metadata values may hold any bytes.
//
// Atomic replacement: save() writes a sibling `<dir>.tmp-<pid>-<n>`, fsyncs its files and itself,
// then swaps it with `<dir>` (renameat2 RENAME_EXCHANGE; where the file system lacks it: rename
// `<dir>` to `<dir>.old-<pid>-<n>`, rename the temporary into place), fsyncs the parent and removes
// the old one. So at every instant `<dir>` is the old or the new complete checkpoint, except in the
// fallback between its two renames, when `<dir>` is missing and `<dir>.old-*` holds the old one.
// Leftovers after a crash:
//   - `<dir>.tmp-*` may be incomplete (or, after a swap, the replaced checkpoint): load() and
//     latest() never read it; the next successful save() of `<dir>` removes those whose process
//     is gone.
//   - `<dir>.old-*` is complete: load(dir) reads the newest one when `<dir>` itself is missing and
//     latest() counts it as its step; the next successful save() of `<dir>` removes it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/element.hpp"
#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af::ckpt {

/// What one checkpoint holds: tensors (unique names, CPU, any dtype and layout) and metadata.
struct checkpoint {
  std::vector<named_tensor> tensors;
  /// Free-form key/value pairs ({"step", "1200"}, {"iterator", <saved state>}); any bytes.
  std::vector<std::pair<std::string, std::string>> metadata;

  /// The tensor named `name`, or nullptr.
  const tensor* find(std::string_view name) const;
  /// The value of metadata key `key` (the first, should keys repeat), or nullptr.
  const std::string* meta(std::string_view key) const;
};

/// Writes `ck` as directory `dir`, atomically replacing any checkpoint already there (see the top
/// of this file). Creates missing parent directories. invalid_argument for an undefined tensor or
/// a repeated tensor name, unsupported for a tensor outside CPU memory, io_error naming the path
/// for any OS failure (the temporary directory is removed then and `dir` is left untouched).
expected<void> save(const std::string& dir, const checkpoint& ck);

/// Reads the checkpoint in `dir` (or, if `dir` is missing, the newest complete `<dir>.old-*` left by
/// a crash). Every problem is an error naming the file and what is wrong: io_error for a missing or
/// unreadable file, malformed_input for a bad magic, a truncated file, an index or metadata digest
/// mismatch, a tensor's digest mismatch (naming the tensor), an entry that does not fit the data,
/// a shape too large to address, a tensor name that repeats.
expected<checkpoint> load(const std::string& dir);

/// A checkpoint whose tensors are read-only views of its data file mapped into memory: nothing is
/// read or copied. Index, metadata and the data file's size are checked as load() checks them; the
/// tensors' digests are not (that reads every byte): verify_digests() does.
struct mapped_checkpoint {
  checkpoint ck;
  std::vector<uint32_t> digests;  ///< per tensor, as the index records them
  std::string data_path;
};
/// `dir` mapped (no `.old-*` fallback: for directories written once, as a SavedModel's variables).
expected<mapped_checkpoint> load_mapped(const std::string& dir);
/// Checks every mapped tensor against its digest; malformed_input naming the file and tensor.
expected<void> verify_digests(const mapped_checkpoint& mapped);

/// Saves `ck` as `base/ckpt-<step>` (atomically, as save()), then removes all but the newest
/// `keep_last` `ckpt-<n>` directories of `base` (keep_last <= 0 keeps all). Returns the path written.
/// invalid_argument for a negative step.
expected<std::string> save_numbered(const std::string& base, int64_t step, const checkpoint& ck,
                                    int keep_last = 3);

/// The path `base/ckpt-<n>` with the largest n (compared as numbers: 10 beats 9) that holds a
/// complete checkpoint (index, data and metadata files present, or a `.old-*` stand-in as load()
/// accepts); nullopt when there is none or `base` does not exist. Temporary directories are ignored.
expected<std::optional<std::string>> latest(const std::string& base);

}  // namespace af::ckpt
