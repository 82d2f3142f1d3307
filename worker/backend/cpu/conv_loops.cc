#include "worker/backend/cpu/conv_loops.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

namespace ps {
namespace cpu_internal {
namespace {

// One image, channel-planar with a zero border of p = (kernel - 1) / 2:
// element (c, y, x) of the NHWC image sits at (c * (h + 2p) + y + p) *
// (w + 2p) + x + p. In this layout the k taps of a patch's kernel row are k
// consecutive floats, both in the padded image and in the cols row (whose
// columns are (c * k + i) * k + j), so im2col and col2im become runs of
// short copies or adds without bounds checks or a transpose per patch.
class PaddedPlanes {
 public:
  PaddedPlanes(const ImageShape& shape, int kernel)
      : h_(shape.height),
        w_(shape.width),
        ch_(shape.channels),
        p_((kernel - 1) / 2),
        ph_(h_ + 2 * p_),
        pw_(w_ + 2 * p_),
        data_(static_cast<size_t>(ch_) * ph_ * pw_) {}

  float* at(int c, int py, int px) {
    return data_.data() + (static_cast<size_t>(c) * ph_ + py) * pw_ + px;
  }
  void Zero() { std::fill(data_.begin(), data_.end(), 0.0f); }

  // From one NHWC image (the border stays as it is).
  void Load(const float* __restrict image) {
    for (int y = 0; y < h_; ++y) {
      for (int x = 0; x < w_; ++x, image += ch_) {
        float* dst = at(0, y + p_, x + p_);
        const size_t plane = static_cast<size_t>(ph_) * pw_;
        for (int c = 0; c < ch_; ++c) dst[c * plane] = image[c];
      }
    }
  }
  // The interior back into one NHWC image.
  void Store(float* __restrict image) {
    for (int y = 0; y < h_; ++y) {
      for (int x = 0; x < w_; ++x, image += ch_) {
        const float* src = at(0, y + p_, x + p_);
        const size_t plane = static_cast<size_t>(ph_) * pw_;
        for (int c = 0; c < ch_; ++c) image[c] = src[c * plane];
      }
    }
  }

 private:
  const int h_, w_, ch_, p_, ph_, pw_;
  std::vector<float> data_;
};

// The patch rows of one image's output pixels. K > 0 fixes the kernel at
// compile time (the runs of K floats become a few vector moves); K == 0 reads
// it from `k`.
template <int K>
float* Im2ColImage(PaddedPlanes* planes, int h, int w, int ch, int k,
                   float* __restrict out) {
  if (K > 0) k = K;
  for (int y = 0; y < h; ++y) {
    for (int px = 0; px < w; ++px) {
      for (int c = 0; c < ch; ++c) {
        for (int i = 0; i < k; ++i, out += k) {
          const float* __restrict src = planes->at(c, y + i, px);
          for (int j = 0; j < k; ++j) out[j] = src[j];
        }
      }
    }
  }
  return out;
}

template <int K>
const float* Col2ImImage(const float* __restrict in, int h, int w, int ch,
                         int k, PaddedPlanes* planes) {
  if (K > 0) k = K;
  for (int y = 0; y < h; ++y) {
    for (int px = 0; px < w; ++px) {
      for (int c = 0; c < ch; ++c) {
        for (int i = 0; i < k; ++i, in += k) {
          float* __restrict dst = planes->at(c, y + i, px);
          for (int j = 0; j < k; ++j) dst[j] += in[j];
        }
      }
    }
  }
  return in;
}

}  // namespace

void Im2ColLoop(const ImageShape& shape, int kernel, const float* x,
                float* cols) {
  const int h = shape.height, w = shape.width, ch = shape.channels;
  const size_t image_size = static_cast<size_t>(h) * w * ch;
  PaddedPlanes planes(shape, kernel);
  planes.Zero();
  float* out = cols;
  for (int n = 0; n < shape.batch; ++n) {
    planes.Load(x + n * image_size);
    switch (kernel) {
      case 3:
        out = Im2ColImage<3>(&planes, h, w, ch, kernel, out);
        break;
      case 5:
        out = Im2ColImage<5>(&planes, h, w, ch, kernel, out);
        break;
      default:
        out = Im2ColImage<0>(&planes, h, w, ch, kernel, out);
    }
  }
}

void Col2ImLoop(const ImageShape& shape, int kernel, const float* cols,
                float* dx) {
  const int h = shape.height, w = shape.width, ch = shape.channels;
  const size_t image_size = static_cast<size_t>(h) * w * ch;
  PaddedPlanes planes(shape, kernel);
  const float* in = cols;
  for (int n = 0; n < shape.batch; ++n) {
    planes.Zero();
    switch (kernel) {
      case 3:
        in = Col2ImImage<3>(in, h, w, ch, kernel, &planes);
        break;
      case 5:
        in = Col2ImImage<5>(in, h, w, ch, kernel, &planes);
        break;
      default:
        in = Col2ImImage<0>(in, h, w, ch, kernel, &planes);
    }
    planes.Store(dx + n * image_size);
  }
}

void MaxPoolLoop(const ImageShape& shape, int pool, const float* x, float* y,
                 int32_t* argmax) {
  const int h = shape.height, w = shape.width, ch = shape.channels;
  const int oh = h / pool, ow = w / pool;
  float* __restrict best = y;
  int32_t* __restrict arg = argmax;
  for (int n = 0; n < shape.batch; ++n) {
    const float* image = x + static_cast<size_t>(n) * h * w * ch;
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox, best += ch, arg += ch) {
        for (int i = 0; i < pool; ++i) {
          const float* __restrict in =
              image + (static_cast<size_t>(oy * pool + i) * w + ox * pool) * ch;
          for (int j = 0; j < pool; ++j, in += ch) {
            const int32_t at = i * pool + j;
            if (at == 0) {
              std::memcpy(best, in, sizeof(float) * ch);
              std::fill(arg, arg + ch, 0);
              continue;
            }
            for (int c = 0; c < ch; ++c) {
              const bool more = in[c] > best[c];
              best[c] = more ? in[c] : best[c];
              arg[c] = more ? at : arg[c];
            }
          }
        }
      }
    }
  }
}

void MaxPoolBackwardLoop(const ImageShape& shape, int pool,
                         const int32_t* argmax, const float* dy, float* dx) {
  const int h = shape.height, w = shape.width, ch = shape.channels;
  const int oh = h / pool, ow = w / pool;
  const size_t row = static_cast<size_t>(w) * ch;
  const int32_t* __restrict arg = argmax;
  const float* __restrict g = dy;
  for (int n = 0; n < shape.batch; ++n) {
    float* image = dx + static_cast<size_t>(n) * h * row;
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox, arg += ch, g += ch) {
        for (int i = 0; i < pool; ++i) {
          float* __restrict out = image + (oy * pool + i) * row +
                                  static_cast<size_t>(ox) * pool * ch;
          for (int j = 0; j < pool; ++j, out += ch) {
            const int32_t at = i * pool + j;
            for (int c = 0; c < ch; ++c) out[c] = arg[c] == at ? g[c] : 0.0f;
          }
        }
      }
      // The columns past the last whole window.
      for (int i = 0; i < pool; ++i) {
        float* out = image + (oy * pool + i) * row;
        std::fill(out + static_cast<size_t>(ow) * pool * ch, out + row, 0.0f);
      }
    }
    // The rows past the last whole window.
    std::fill(image + oh * pool * row, image + h * row, 0.0f);
  }
}

}  // namespace cpu_internal
}  // namespace ps
