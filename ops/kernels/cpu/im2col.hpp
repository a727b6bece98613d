#pragma once

// The patch matrix shared by conv2d and its gradients (NHWC input, HWIO filter, TensorFlow's
// padding). Row r is output pixel r (image-major); it holds, per group, the window [kh][kw][cg],
// which is exactly the row order of that group's HWIO filter slice. `G` is any geometry with the
// fields n, h, w, cin, kh, kw, cg, groups, sh, sw, dh, dw, oh, ow, pad_top, pad_left.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/parallel.hpp"

namespace af::cpu {

/// Row length of the patch matrix.
template <class G>
int64_t patch_row(const G& g) {
  return g.groups * g.kh * g.kw * g.cg;
}

/// Rows [r0, r0 + rows) of the patch matrix into `col` (rows x patch_row), zeros for padding.
template <class T, class G>
void im2col(const T* in, T* col, const G& g, int64_t r0, int64_t rows) {
  const int64_t lda = patch_row(g);
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, lda)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = r0 + i;
      const int64_t b = r / (g.oh * g.ow), y = (r / g.ow) % g.oh, x = r % g.ow;
      T* dst = col + i * lda;
      for (int64_t gi = 0; gi < g.groups; ++gi)
        for (int64_t a = 0; a < g.kh; ++a) {
          const int64_t ih = y * g.sh - g.pad_top + a * g.dh;
          for (int64_t c = 0; c < g.kw; ++c, dst += g.cg) {
            const int64_t iw = x * g.sw - g.pad_left + c * g.dw;
            if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w)
              std::fill(dst, dst + g.cg, T{0});
            else
              std::memcpy(dst, in + ((b * g.h + ih) * g.w + iw) * g.cin + gi * g.cg, static_cast<std::size_t>(g.cg) * sizeof(T));
          }
        }
    }
  });
}

/// The reverse: adds rows [r0, r0 + rows) of a patch matrix back into the input-shaped `dx`. The
/// rows must cover whole images (r0 and rows multiples of oh * ow): images run in parallel, and
/// windows of one image overlap.
template <class T, class G>
void col2im_add(const T* col, T* dx, const G& g, int64_t r0, int64_t rows) {
  const int64_t lda = patch_row(g), per_image = g.oh * g.ow;
  parallel_for(rows / per_image, 1, [&](int64_t first, int64_t last) {
    for (int64_t image = first; image < last; ++image)
      for (int64_t p = 0; p < per_image; ++p) {
        const int64_t i = image * per_image + p, r = r0 + i;
        const int64_t b = r / per_image, y = (r / g.ow) % g.oh, x = r % g.ow;
        const T* src = col + i * lda;
        for (int64_t gi = 0; gi < g.groups; ++gi)
          for (int64_t a = 0; a < g.kh; ++a) {
            const int64_t ih = y * g.sh - g.pad_top + a * g.dh;
            for (int64_t c = 0; c < g.kw; ++c, src += g.cg) {
              const int64_t iw = x * g.sw - g.pad_left + c * g.dw;
              if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
              T* d = dx + ((b * g.h + ih) * g.w + iw) * g.cin + gi * g.cg;
              for (int64_t k = 0; k < g.cg; ++k) d[k] += src[k];
            }
          }
      }
  });
}

}  // namespace af::cpu
