// Compiled training kernels for CPUs, over the rows of a [rows, width] tensor (bfloat16
// or float32): bias + dropout + residual add + LayerNorm, and bias + exact GELU, each
// forward and backward.
//
// They compute what keras_electra/kernels/xla.py's XLA kernels _add_norm_forward and
// _add_norm_backward compute, with the same hashed dropout draws (an element's draw is
// MurmurHash3's finalizer of (flat index * 0x9E3779B9 + key[0]) ^ key[1], its top 16
// bits; kept where the draw >= threshold, then scaled). The arithmetic is float32; the
// sums run in a different order than XLA's, so an output can differ from XLA's by one
// rounding step of its dtype. Plain loops that the compiler vectorizes; rows split over
// TensorFlow's intra-op threads. Bias + GELU is _bias_gelu_forward / _bias_gelu_backward's
// math with Eigen's vectorized erf and exp. Built by keras_electra/kernels/compiled.py.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "unsupported/Eigen/SpecialFunctions"

namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

inline float widen(float v) { return v; }
inline float widen(Eigen::bfloat16 v) {
  uint16_t h;
  std::memcpy(&h, &v, 2);
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
inline T narrow(float f);
template <>
inline float narrow<float>(float f) {
  return f;
}
template <>
inline Eigen::bfloat16 narrow<Eigen::bfloat16>(float f) {
  // Round to nearest even, as XLA's and TensorFlow's conversions do (NaN stays NaN).
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t h;
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    h = uint16_t((u >> 16) | 0x40u);
  } else {
    u += 0x7FFFu + ((u >> 16) & 1u);
    h = uint16_t(u >> 16);
  }
  Eigen::bfloat16 out;
  std::memcpy(&out, &h, 2);
  return out;
}

inline uint32_t draw(uint32_t index, uint32_t key0, uint32_t key1) {
  uint32_t x = (index * 0x9E3779B9u + key0) ^ key1;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x >> 16;
}

// The dropout of one row, applied in place to v (float32): v * scale where kept, else 0.
struct Dropout {
  bool on = false;
  uint32_t key0 = 0, key1 = 0, threshold = 0;
  float scale = 1.f;

  // The key, threshold and scale are the op's inputs `first`, `first + 1`, `first + 2`.
  Dropout(OpKernelContext* ctx, bool enabled, int first = 4) : on(enabled) {
    if (!on) return;
    auto key = ctx->input(first).flat<uint32_t>();
    key0 = key(0);
    key1 = key(1);
    threshold = ctx->input(first + 1).scalar<uint32_t>()();
    scale = ctx->input(first + 2).scalar<float>()();
  }
  void apply(float* v, int64_t row, int64_t width) const {
    if (!on) return;
    // Locals, not members: the loop then vectorizes (no possible alias with v).
    const uint32_t start = uint32_t(row * width), k0 = key0, k1 = key1, cut = threshold;
    const float by = scale;
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) {
      const float kept = v[i] * by;
      v[i] = draw(start + uint32_t(i), k0, k1) >= cut ? kept : 0.f;
    }
  }
};

void run_rows(OpKernelContext* ctx, int64_t rows, int64_t width, int64_t cost_per_row,
              const std::function<void(int64_t, int64_t)>& work) {
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  pool->ParallelFor(rows, cost_per_row, work);
}

// out[i] = the sum over k < count of partial[k * stride + i], for i < width: column sums
// kept per block of rows (blocks run on different threads), added up in block order.
void add_up(const float* partial, int64_t count, int64_t stride, int64_t width, float* out) {
  std::fill(out, out + width, 0.f);
  for (int64_t k = 0; k < count; ++k) {
    for (int64_t i = 0; i < width; ++i) out[i] += partial[k * stride + i];
  }
}

// A thread's float32 scratch rows: `count` rows of `width`, each starting on a 64-byte
// boundary (the row stride rounded up to 16 floats). Eigen's vectorized exp and erf then
// run over whole rows; on a misaligned row it computes the first and last few elements
// one at a time through the C library's expf: a sixth of the attention softmax kernel's
// samples in perf.
class Scratch {
 public:
  Scratch(int64_t width, int count) : stride_((width + 15) / 16 * 16), data_(stride_ * count) {}
  float* row(int i) { return data_.data() + stride_ * i; }

 private:
  int64_t stride_;
  std::vector<float, Eigen::aligned_allocator<float>> data_;
};

template <typename T>
class AddLayerNormOp : public OpKernel {
 public:
  explicit AddLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dropout", &dropout_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& residual = ctx->input(1);
    OP_REQUIRES(ctx, x.dims() == 2 && x.shape() == residual.shape(),
                tensorflow::errors::InvalidArgument("x and residual must be the same [rows, width]"));
    const int64_t rows = x.dim_size(0), width = x.dim_size(1);
    OP_REQUIRES(ctx, ctx->input(2).NumElements() == width && ctx->input(3).NumElements() == width,
                tensorflow::errors::InvalidArgument("gamma and beta must be [width]"));
    const Tensor& bias_in = ctx->input(7);
    OP_REQUIRES(ctx, bias_in.NumElements() == width || bias_in.NumElements() == 0,
                tensorflow::errors::InvalidArgument("bias must be [width] or empty"));
    const float* bias = bias_in.NumElements() ? bias_in.flat<float>().data() : nullptr;
    Tensor *y = nullptr, *inv_std = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({rows, 1}), &inv_std));
    const T* xp = x.flat<T>().data();
    const T* rp = residual.flat<T>().data();
    const float* gamma = ctx->input(2).flat<float>().data();
    const float* beta = ctx->input(3).flat<float>().data();
    T* yp = y->flat<T>().data();
    float* ip = inv_std->flat<float>().data();
    const Dropout drop(ctx, dropout_);
    const float epsilon = epsilon_;
    run_rows(ctx, rows, width, 40 * width, [&](int64_t begin, int64_t end) {
      Scratch buffer(width, 1);
      float* s = buffer.row(0);
      for (int64_t row = begin; row < end; ++row) {
        const T* xr = xp + row * width;
        const T* rr = rp + row * width;
        if (bias != nullptr) {
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) s[i] = widen(xr[i]) + bias[i];
        } else {
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) s[i] = widen(xr[i]);
        }
        drop.apply(s, row, width);
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < width; ++i) {
          s[i] += widen(rr[i]);
          sum += s[i];
        }
        const float mean = sum / float(width);
        float squares = 0.f;
#pragma omp simd reduction(+ : squares)
        for (int64_t i = 0; i < width; ++i) {
          s[i] -= mean;
          squares += s[i] * s[i];
        }
        const float inv = 1.f / std::sqrt(squares / float(width) + epsilon);
        ip[row] = inv;
        T* yr = yp + row * width;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) yr[i] = narrow<T>(s[i] * inv * gamma[i] + beta[i]);
      }
    });
  }

 private:
  float epsilon_;
  bool dropout_;
};

// The smallest |gamma| the backward divides by (xla.py's _SMALLEST_GAMMA).
constexpr float kSmallestGamma = 1e-3f;

template <typename T>
class AddLayerNormGradOp : public OpKernel {
 public:
  explicit AddLayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dropout", &dropout_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_bias", &with_bias_));
  }

  void Compute(OpKernelContext* ctx) override {
    // Inputs: y, upstream, gamma, beta, key, threshold, scale, inv_std. With `with_bias`
    // the fifth output is the gradient of the bias the forward added to x (dx's column
    // sums), else empty.
    const Tensor& y = ctx->input(0);
    const Tensor& upstream = ctx->input(1);
    const Tensor& inv_std = ctx->input(7);
    OP_REQUIRES(ctx, y.dims() == 2 && y.shape() == upstream.shape(),
                tensorflow::errors::InvalidArgument("y and upstream must be the same [rows, width]"));
    const int64_t rows = y.dim_size(0), width = y.dim_size(1);
    OP_REQUIRES(ctx, inv_std.NumElements() == rows,
                tensorflow::errors::InvalidArgument("inv_std must hold one value per row"));
    Tensor *dx = nullptr, *ds = nullptr, *dgamma = nullptr, *dbeta = nullptr, *dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, y.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, y.shape(), &ds));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({width}), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({width}), &dbeta));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({with_bias_ ? width : 0}), &dbias));
    const int sums = with_bias_ ? 3 : 2;
    const T* yp = y.flat<T>().data();
    const T* up = upstream.flat<T>().data();
    const float* gamma = ctx->input(2).flat<float>().data();
    const float* beta = ctx->input(3).flat<float>().data();
    const float* ip = inv_std.flat<float>().data();
    T* dxp = dx->flat<T>().data();
    T* dsp = ds->flat<T>().data();
    const Dropout drop(ctx, dropout_);

    std::vector<float> divisor(width);
    for (int64_t i = 0; i < width; ++i) {
      const float g = gamma[i];
      divisor[i] = std::fabs(g) < kSmallestGamma ? (g < 0 ? -kSmallestGamma : kSmallestGamma) : g;
    }
    // Column sums per block of rows, added up after (blocks run on different threads).
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(rows, 64));  // 1 for no rows
    std::vector<float> partial(sums * blocks * width, 0.f);
    const float* dv = divisor.data();
    run_rows(ctx, blocks, width, 80 * width * ((rows + blocks - 1) / blocks),
             [&](int64_t first_block, int64_t last_block) {
      // Locals: through the lambda's references, GCC vectorized the loops below with
      // gathers for gamma, beta and the divisor (1.5x the kernel's time).
      const float* __restrict gamma_ = gamma;
      const float* __restrict beta_ = beta;
      const float* __restrict dv_ = dv;
      Scratch buffer(width, 3);
      float* normalized = buffer.row(0);
      float* dy = buffer.row(1);
      float* out = buffer.row(2);
      for (int64_t block = first_block; block < last_block; ++block) {
        float* pg = partial.data() + sums * block * width;
        float* pb = pg + width;
        float* px = with_bias_ ? pb + width : nullptr;
        const int64_t begin = rows * block / blocks, end = rows * (block + 1) / blocks;
        for (int64_t row = begin; row < end; ++row) {
          const T* yr = yp + row * width;
          const T* ur = up + row * width;
          float mean_g = 0.f, mean_gn = 0.f;
#pragma omp simd reduction(+ : mean_g, mean_gn)
          for (int64_t i = 0; i < width; ++i) {
            normalized[i] = (widen(yr[i]) - beta_[i]) / dv_[i];
            dy[i] = widen(ur[i]);
            const float g = dy[i] * gamma_[i];
            mean_g += g;
            mean_gn += g * normalized[i];
          }
          mean_g /= float(width);
          mean_gn /= float(width);
          const float inv = ip[row];
          T* dsr = dsp + row * width;
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            pg[i] += dy[i] * normalized[i];
            pb[i] += dy[i];
            out[i] = inv * (dy[i] * gamma_[i] - mean_g - normalized[i] * mean_gn);
            dsr[i] = narrow<T>(out[i]);
          }
          drop.apply(out, row, width);
          T* dxr = dxp + row * width;
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) dxr[i] = narrow<T>(out[i]);
          if (px != nullptr) {  // the bias added to x: its gradient, x's summed over rows
#pragma omp simd
            for (int64_t i = 0; i < width; ++i) px[i] += out[i];
          }
        }
      }
    });
    // Each block's partial holds `sums` rows: dgamma's, dbeta's and (with a bias) dx's.
    const int64_t stride = sums * width;
    add_up(partial.data(), blocks, stride, width, dgamma->flat<float>().data());
    add_up(partial.data() + width, blocks, stride, width, dbeta->flat<float>().data());
    if (with_bias_) {
      add_up(partial.data() + 2 * width, blocks, stride, width, dbias->flat<float>().data());
    }
  }

 private:
  bool dropout_;
  bool with_bias_;
};

constexpr float kSqrtHalf = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <typename T>
using Row = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using OutRow = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
using Floats = Eigen::Map<Eigen::ArrayXf>;
// A Scratch row.
using Aligned = Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>;

template <typename T>
class BiasGeluOp : public OpKernel {
 public:
  explicit BiasGeluOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& h = ctx->input(0);
    OP_REQUIRES(ctx, h.dims() == 2 && ctx->input(1).NumElements() == h.dim_size(1),
                tensorflow::errors::InvalidArgument("h must be [rows, width], bias [width]"));
    const int64_t rows = h.dim_size(0), width = h.dim_size(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, h.shape(), &out));
    const T* hp = h.flat<T>().data();
    const float* bias = ctx->input(1).flat<float>().data();
    T* op = out->flat<T>().data();
    run_rows(ctx, rows, width, 60 * width, [&](int64_t begin, int64_t end) {
      Scratch buffer(width, 1);
      Aligned z(buffer.row(0), width);
      const Row<float> b(bias, width);
      for (int64_t row = begin; row < end; ++row) {
        z = Row<T>(hp + row * width, width).template cast<float>() + b;
        z = 0.5f * z * (1.f + (z * kSqrtHalf).erf());
        OutRow<T>(op + row * width, width) = z.template cast<T>();
      }
    });
  }
};

template <typename T>
class BiasGeluGradOp : public OpKernel {
 public:
  explicit BiasGeluGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_output", &with_output_));
  }

  void Compute(OpKernelContext* ctx) override {
    // Inputs: h, bias, upstream. Outputs: dh (T), dbias (float32 column sums) and, with
    // `with_output`, gelu(h + bias) (T) from the same erf: the backward of a GELU whose
    // output was not kept recomputes it here, in the pass that needs the erf anyway.
    const Tensor& h = ctx->input(0);
    const Tensor& upstream = ctx->input(2);
    OP_REQUIRES(ctx, h.dims() == 2 && h.shape() == upstream.shape() &&
                         ctx->input(1).NumElements() == h.dim_size(1),
                tensorflow::errors::InvalidArgument("h and upstream must be [rows, width], bias [width]"));
    const int64_t rows = h.dim_size(0), width = h.dim_size(1);
    Tensor *dh = nullptr, *dbias = nullptr, *y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, h.shape(), &dh));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({width}), &dbias));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, with_output_ ? h.shape() : TensorShape({0}), &y));
    const T* hp = h.flat<T>().data();
    const T* up = upstream.flat<T>().data();
    const float* bias = ctx->input(1).flat<float>().data();
    T* dp = dh->flat<T>().data();
    T* yp = with_output_ ? y->flat<T>().data() : nullptr;
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(rows, 64));  // 1 for no rows
    std::vector<float> partial(blocks * width, 0.f);
    run_rows(ctx, blocks, width, 100 * width * ((rows + blocks - 1) / blocks),
             [&](int64_t first_block, int64_t last_block) {
      Scratch buffer(width, 3);
      Aligned z(buffer.row(0), width), dz(buffer.row(1), width), phi(buffer.row(2), width);
      const Row<float> b(bias, width);
      for (int64_t block = first_block; block < last_block; ++block) {
        Floats sums(partial.data() + block * width, width);
        const int64_t begin = rows * block / blocks, end = rows * (block + 1) / blocks;
        for (int64_t row = begin; row < end; ++row) {
          z = Row<T>(hp + row * width, width).template cast<float>() + b;
          phi = 0.5f * (1.f + (z * kSqrtHalf).erf());
          dz = Row<T>(up + row * width, width).template cast<float>() *
               (phi + z * (-0.5f * z * z).exp() * kInvSqrt2Pi);
          sums += dz;
          OutRow<T>(dp + row * width, width) = dz.template cast<T>();
          if (yp != nullptr) OutRow<T>(yp + row * width, width) = (z * phi).template cast<T>();
        }
      }
    });
    add_up(partial.data(), blocks, width, width, dbias->flat<float>().data());
  }

 private:
  bool with_output_;
};

// The attention's probabilities: softmax(scale * scores) over the last axis where `keep`
// (bool, the scores' rank, each axis the scores' size or 1: broadcast), 0 elsewhere; a
// masked score enters the softmax as -1e9, as Keras' masked Softmax puts it.
constexpr float kMasked = -1e9f;

// For each row of scores (all axes but the last), the offset of its row of `keep`.
std::vector<int64_t> keep_rows(const Tensor& scores, const Tensor& keep) {
  const int rank = scores.dims();
  std::vector<int64_t> offsets(scores.NumElements() / scores.dim_size(rank - 1), 0);
  std::vector<int64_t> stride(rank, 0), index(rank, 0);
  int64_t step = keep.dim_size(rank - 1);
  for (int axis = rank - 2; axis >= 0; --axis) {
    stride[axis] = keep.dim_size(axis) == 1 ? 0 : step;
    step *= keep.dim_size(axis);
  }
  // The rows in order, their index counted like an odometer (no division per row: the
  // divisions took 3% of the kernel's samples in perf at [32, 4, 128, 128]).
  int64_t offset = 0;
  for (int64_t row = 0; row < int64_t(offsets.size()); ++row) {
    offsets[row] = offset;
    for (int axis = rank - 2; axis >= 0; --axis) {
      offset += stride[axis];
      if (++index[axis] < scores.dim_size(axis)) break;
      offset -= stride[axis] * index[axis];
      index[axis] = 0;
    }
  }
  return offsets;
}

// The attention's ops: a `scale` for the scores and whether a dropout follows.
class AttentionOp : public OpKernel {
 public:
  explicit AttentionOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dropout", &dropout_));
  }

 protected:
  float scale_;
  bool dropout_;
};

template <typename T>
class AttentionProbsOp : public AttentionOp {
 public:
  using AttentionOp::AttentionOp;

  void Compute(OpKernelContext* ctx) override {
    // Inputs: scores, keep, key, threshold, scale. Outputs: probs, dropped (T).
    const Tensor& scores = ctx->input(0);
    const Tensor& keep = ctx->input(1);
    const int rank = scores.dims();
    bool broadcastable = rank >= 1 && keep.dims() == rank;
    for (int axis = 0; broadcastable && axis < rank; ++axis) {
      broadcastable = keep.dim_size(axis) == 1 || keep.dim_size(axis) == scores.dim_size(axis);
    }
    OP_REQUIRES(ctx, broadcastable,
                tensorflow::errors::InvalidArgument("keep must broadcast to the scores"));
    const int64_t width = scores.dim_size(rank - 1);
    const int64_t rows = width ? scores.NumElements() / width : 0;
    Tensor *probs = nullptr, *dropped = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, scores.shape(), &probs));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, dropout_ ? scores.shape() : TensorShape({0}), &dropped));
    if (rows == 0) return;
    const std::vector<int64_t> offsets = keep_rows(scores, keep);
    const bool keep_all_columns = keep.dim_size(rank - 1) == 1;
    const T* sp = scores.flat<T>().data();
    const bool* kp = keep.flat<bool>().data();
    T* pp = probs->flat<T>().data();
    T* dp = dropout_ ? dropped->flat<T>().data() : nullptr;
    const Dropout drop(ctx, dropout_, 2);
    const float scale = scale_;
    run_rows(ctx, rows, width, 60 * width, [&](int64_t begin, int64_t end) {
      Scratch buffer(width, 1);
      float* zp = buffer.row(0);
      Aligned z(zp, width);
      for (int64_t row = begin; row < end; ++row) {
        const T* sr = sp + row * width;
        // Read as bytes (a bool is one): byte loads vectorize where bool ones do not.
        const uint8_t* kr = reinterpret_cast<const uint8_t*>(kp + offsets[row]);
        T* pr = pp + row * width;
        if (keep_all_columns && !kr[0]) {  // a row with no key: probabilities 0
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) pr[i] = narrow<T>(0.f);
        } else if (keep_all_columns) {
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) zp[i] = widen(sr[i]) * scale;
          z = (z - z.maxCoeff()).exp();
          z *= 1.f / z.sum();  // a multiply: dividing each element took 9% more
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) pr[i] = narrow<T>(zp[i]);
        } else {
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            const float score = widen(sr[i]) * scale;
            zp[i] = kr[i] != 0 ? score : kMasked;
          }
          z = (z - z.maxCoeff()).exp();
          z *= 1.f / z.sum();  // a multiply: dividing each element took 9% more
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            const float p = zp[i];
            pr[i] = narrow<T>(kr[i] != 0 ? p : 0.f);
          }
        }
        if (dp != nullptr) {  // the dropout acts on the rounded probabilities
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) zp[i] = widen(pr[i]);
          drop.apply(zp, row, width);
          T* dr = dp + row * width;
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) dr[i] = narrow<T>(zp[i]);
        }
      }
    });
  }
};

template <typename T>
class AttentionProbsGradOp : public AttentionOp {
 public:
  using AttentionOp::AttentionOp;

  void Compute(OpKernelContext* ctx) override {
    // Inputs: probs, upstream (the gradient for the dropped probabilities), key,
    // threshold, scale. Output: the gradient for the scores.
    const Tensor& probs = ctx->input(0);
    const Tensor& upstream = ctx->input(1);
    OP_REQUIRES(ctx, probs.dims() >= 1 && probs.NumElements() == upstream.NumElements(),
                tensorflow::errors::InvalidArgument("probs and upstream must hold as many values"));
    const int64_t width = probs.dim_size(probs.dims() - 1);
    const int64_t rows = width ? probs.NumElements() / width : 0;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, probs.shape(), &out));
    if (rows == 0) return;
    const T* pp = probs.flat<T>().data();
    const T* up = upstream.flat<T>().data();
    T* op = out->flat<T>().data();
    const Dropout drop(ctx, dropout_, 2);
    const float scale = scale_;
    run_rows(ctx, rows, width, 40 * width, [&](int64_t begin, int64_t end) {
      Scratch buffer(width, 2);
      Aligned p(buffer.row(0), width), g(buffer.row(1), width);
      for (int64_t row = begin; row < end; ++row) {
        p = Row<T>(pp + row * width, width).template cast<float>();
        g = Row<T>(up + row * width, width).template cast<float>();
        drop.apply(g.data(), row, width);
        const float dot = (g * p).sum();
        OutRow<T>(op + row * width, width) = (scale * p * (g - dot)).template cast<T>();
      }
    });
  }
};

template <typename T>
class DropoutOp : public OpKernel {
 public:
  explicit DropoutOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    // Inputs: x (its last axis the rows' width), key, threshold, scale.
    const Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dims() >= 1, tensorflow::errors::InvalidArgument("x must have an axis"));
    const int64_t width = x.dim_size(x.dims() - 1);
    const int64_t rows = width ? x.NumElements() / width : 0;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    if (rows == 0) return;
    const T* xp = x.flat<T>().data();
    T* op = out->flat<T>().data();
    const Dropout drop(ctx, true, 1);
    run_rows(ctx, rows, width, 10 * width, [&](int64_t begin, int64_t end) {
      Scratch buffer(width, 1);
      float* b = buffer.row(0);
      for (int64_t row = begin; row < end; ++row) {
        const T* xr = xp + row * width;
        T* yr = op + row * width;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) b[i] = widen(xr[i]);
        drop.apply(b, row, width);
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) yr[i] = narrow<T>(b[i]);
      }
    });
  }
};

// The first index of `row` whose value equals `value`, 0 if none does (a NaN): chunks
// compared as vectors, then the chunk that holds it one element at a time.
int32_t first_equal(const float* row, int64_t n, float value) {
  constexpr int64_t kChunk = 64;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t stop = std::min(n, start + kChunk);
    int hit = 0;
#pragma omp simd reduction(| : hit)
    for (int64_t i = start; i < stop; ++i) hit |= row[i] == value;
    if (!hit) continue;
    for (int64_t i = start; i < stop; ++i) {
      if (row[i] == value) return int32_t(i);
    }
  }
  return 0;
}

// Inverse-CDF sampling over one row of non-negative weights w[0, vocab), in two levels as
// objective.inverse_cdf: `cdf` gets the running totals of blocks of `block` entries (the
// last is the row's total), then the first index whose cumulative weight exceeds
// uniform * total is found in the block that holds it.
float block_totals(const float* w, int64_t vocab, int64_t block, std::vector<float>& cdf) {
  const int64_t blocks = (vocab + block - 1) / block;
  cdf.resize(blocks);
  float running = 0.f;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * block, last = std::min(vocab, first + block);
    float total = 0.f;
#pragma omp simd reduction(+ : total)
    for (int64_t i = first; i < last; ++i) total += w[i];
    running += total;
    cdf[b] = running;
  }
  return running;
}

int32_t inverse_cdf(const float* w, int64_t vocab, int64_t block, const std::vector<float>& cdf,
                    float uniform) {
  const int64_t blocks = int64_t(cdf.size());
  const float whole = cdf[blocks - 1];
  // A target kept below the total never lands past the last entry with weight.
  const float target = std::min(uniform * whole, std::nextafter(whole, 0.f));
  int64_t which = 0;
  while (which < blocks - 1 && !(cdf[which] > target)) ++which;  // NaNs: the last block
  const int64_t first = which * block, last = std::min(vocab, first + block);
  float inner_total = 0.f;
  for (int64_t i = first; i < last; ++i) inner_total += w[i];
  const float before = which ? cdf[which - 1] : 0.f;
  const float rest = std::min(std::max(target - before, 0.f), std::nextafter(inner_total, 0.f));
  int64_t index = first;
  float cumulative = 0.f;
  for (; index < last - 1; ++index) {
    cumulative += w[index];
    if (cumulative > rest) break;
  }
  return int32_t(std::min(index, vocab - 1));
}

// Softmax cross-entropy against integer labels over rows of logits [rows, vocab] (T), one
// read of each row: the loss (log-sum-exp minus the label's logit), the argmax (the first
// largest logit), the log-sum-exp (what the backward pass recomputes the probabilities
// from: nothing [rows, vocab] is kept) and, given a uniform per row, a draw from the
// softmax by inverse CDF (else an empty output).
// The sampling ops: entries per block of the inverse CDF's first level.
class BlockSearchOp : public OpKernel {
 public:
  explicit BlockSearchOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block", &block_));
    OP_REQUIRES(ctx, block_ > 0, tensorflow::errors::InvalidArgument("block must be positive"));
  }

 protected:
  int block_;
};

template <typename T>
class SoftmaxXentOp : public BlockSearchOp {
 public:
  using BlockSearchOp::BlockSearchOp;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    const Tensor& uniform = ctx->input(2);
    OP_REQUIRES(ctx, logits.dims() == 2 && labels.NumElements() == logits.dim_size(0),
                tensorflow::errors::InvalidArgument("logits must be [rows, vocab], labels [rows]"));
    const int64_t rows = logits.dim_size(0), vocab = logits.dim_size(1);
    const bool sample = uniform.NumElements() > 0;
    OP_REQUIRES(ctx, !sample || uniform.NumElements() == rows,
                tensorflow::errors::InvalidArgument("uniform must be [rows] or empty"));
    OP_REQUIRES(ctx, vocab > 0, tensorflow::errors::InvalidArgument("the vocabulary is empty"));
    const int32_t* lp = labels.flat<int32_t>().data();
    for (int64_t row = 0; row < rows; ++row) {
      OP_REQUIRES(ctx, lp[row] >= 0 && lp[row] < vocab,
                  tensorflow::errors::InvalidArgument("label ", lp[row], " is outside [0, ",
                                                      vocab, ")"));
    }
    Tensor *loss = nullptr, *best = nullptr, *lse = nullptr, *sampled = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows}), &loss));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({rows}), &best));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({rows}), &lse));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({sample ? rows : 0}), &sampled));
    const T* zp = logits.flat<T>().data();
    const float* up = sample ? uniform.flat<float>().data() : nullptr;
    float* loss_p = loss->flat<float>().data();
    int32_t* best_p = best->flat<int32_t>().data();
    float* lse_p = lse->flat<float>().data();
    int32_t* sampled_p = sample ? sampled->flat<int32_t>().data() : nullptr;
    const int64_t block = block_;
    run_rows(ctx, rows, vocab, 30 * vocab, [&](int64_t begin, int64_t end) {
      Scratch buffer(vocab, 1);
      std::vector<float> cdf;
      float* e = buffer.row(0);
      for (int64_t row = begin; row < end; ++row) {
        const T* zr = zp + row * vocab;
#pragma omp simd
        for (int64_t i = 0; i < vocab; ++i) e[i] = widen(zr[i]);
        // Eigen's reduction: GCC compiled a max folded into the loop above as one
        // dependent vmaxss per logit (18 ms per [608, 30522] on two threads; now 7).
        Aligned weights(e, vocab);
        const float top = weights.maxCoeff();
        const int32_t arg = first_equal(e, vocab, top);
        weights = (weights - top).exp();
        const float total = block_totals(e, vocab, block, cdf);
        const float log_sum_exp = top + std::log(total);
        best_p[row] = arg;
        lse_p[row] = log_sum_exp;
        loss_p[row] = log_sum_exp - widen(zr[lp[row]]);
        if (sample) sampled_p[row] = inverse_cdf(e, vocab, block, cdf, up[row]);
      }
    });
  }

};

// SoftmaxXent's gradient for the logits: (softmax - onehot(label)) * upstream in T, the
// softmax recomputed as exp(logit - log-sum-exp).
template <typename T>
class SoftmaxXentGradOp : public OpKernel {
 public:
  explicit SoftmaxXentGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& logits = ctx->input(0);
    const Tensor& lse = ctx->input(1);
    const Tensor& labels = ctx->input(2);
    const Tensor& upstream = ctx->input(3);
    const int64_t rows = logits.dims() == 2 ? logits.dim_size(0) : -1;
    OP_REQUIRES(ctx, rows >= 0 && lse.NumElements() == rows && labels.NumElements() == rows &&
                         upstream.NumElements() == rows,
                tensorflow::errors::InvalidArgument("logits must be [rows, vocab]; lse, labels and upstream [rows]"));
    const int64_t vocab = logits.dim_size(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, logits.shape(), &out));
    const T* zp = logits.flat<T>().data();
    const float* lp = lse.flat<float>().data();
    const int32_t* label_p = labels.flat<int32_t>().data();
    const float* up = upstream.flat<float>().data();
    T* op = out->flat<T>().data();
    run_rows(ctx, rows, vocab, 20 * vocab, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        // One pass from the logits to the output: through a float32 row buffer (written,
        // then read to round) the kernel took 1.5 times as long.
        const float u = up[row], shift = lp[row];
        const T* zr = zp + row * vocab;
        T* out = op + row * vocab;
        OutRow<T>(out, vocab) =
            ((Row<T>(zr, vocab).template cast<float>() - shift).exp() * u).template cast<T>();
        const int64_t label = label_p[row];
        if (label >= 0 && label < vocab) {
          out[label] = narrow<T>(std::exp(widen(zr[label]) - shift) * u - u);
        }
      }
    });
  }
};

// Inverse-CDF sampling on float32 weights [rows, vocab], one uniform per row.
class InverseCdfOp : public BlockSearchOp {
 public:
  using BlockSearchOp::BlockSearchOp;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& probs = ctx->input(0);
    const Tensor& uniform = ctx->input(1);
    OP_REQUIRES(ctx, probs.dims() == 2 && uniform.NumElements() == probs.dim_size(0),
                tensorflow::errors::InvalidArgument("probs must be [rows, vocab], uniform [rows]"));
    const int64_t rows = probs.dim_size(0), vocab = probs.dim_size(1);
    OP_REQUIRES(ctx, vocab > 0, tensorflow::errors::InvalidArgument("the vocabulary is empty"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows}), &out));
    const float* pp = probs.flat<float>().data();
    const float* up = uniform.flat<float>().data();
    int32_t* op = out->flat<int32_t>().data();
    const int64_t block = block_;
    run_rows(ctx, rows, vocab, 2 * vocab, [&](int64_t begin, int64_t end) {
      std::vector<float> cdf;
      for (int64_t row = begin; row < end; ++row) {
        const float* w = pp + row * vocab;
        block_totals(w, vocab, block, cdf);
        op[row] = inverse_cdf(w, vocab, block, cdf, up[row]);
      }
    });
  }

};

// The attention's query, key and value from one projection: qkv [batch, length, 3 * heads
// * dim] (a [rows, 3 * heads * dim] matmul's output) plus its bias, split into q, k and v
// of [batch, heads, length, dim] each, in one pass (for TensorFlow's ops: the bias add,
// the transpose to [3, batch, heads, length, dim] and the unstack, three passes).
template <typename T>
class SplitHeadsOp : public OpKernel {
 public:
  explicit SplitHeadsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("heads", &heads_));
    OP_REQUIRES(ctx, heads_ > 0, tensorflow::errors::InvalidArgument("heads must be positive"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& qkv = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    OP_REQUIRES(ctx, qkv.dims() == 3 && qkv.dim_size(2) % (3 * heads_) == 0,
                tensorflow::errors::InvalidArgument("qkv must be [batch, length, 3 * heads * dim]"));
    const int64_t batch = qkv.dim_size(0), length = qkv.dim_size(1), width = qkv.dim_size(2);
    OP_REQUIRES(ctx, bias.NumElements() == width,
                tensorflow::errors::InvalidArgument("bias must be [3 * heads * dim]"));
    const int64_t heads = heads_, dim = width / (3 * heads);
    const TensorShape shape({batch, heads, length, dim});
    T* outs[3];
    for (int part = 0; part < 3; ++part) {
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(part, shape, &out));
      outs[part] = out->flat<T>().data();
    }
    const T* src = qkv.flat<T>().data();
    const float* bp = bias.flat<float>().data();
    run_rows(ctx, batch * length, width, 4 * width, [&](int64_t begin, int64_t end) {
      const float* __restrict b = bp;
      for (int64_t row = begin; row < end; ++row) {
        const int64_t sequence = row / length, position = row % length;
        const T* __restrict in = src + row * width;
        for (int64_t part = 0; part < 3; ++part) {
          for (int64_t head = 0; head < heads; ++head) {
            const int64_t column = (part * heads + head) * dim;
            T* __restrict out = outs[part] + ((sequence * heads + head) * length + position) * dim;
#pragma omp simd
            for (int64_t i = 0; i < dim; ++i) out[i] = narrow<T>(widen(in[column + i]) + b[column + i]);
          }
        }
      }
    });
  }

 private:
  int heads_;
};

// SplitHeads' gradient: dq, dk, dv [batch, heads, length, dim] back into one
// [batch, length, 3 * heads * dim] tensor, and the bias's gradient (its column sums,
// float32), in one pass.
template <typename T>
class MergeHeadsOp : public OpKernel {
 public:
  explicit MergeHeadsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dq = ctx->input(0);
    OP_REQUIRES(ctx, dq.dims() == 4 && dq.shape() == ctx->input(1).shape() &&
                         dq.shape() == ctx->input(2).shape(),
                tensorflow::errors::InvalidArgument("dq, dk and dv must be the same [batch, heads, length, dim]"));
    const int64_t batch = dq.dim_size(0), heads = dq.dim_size(1), length = dq.dim_size(2),
                  dim = dq.dim_size(3), width = 3 * heads * dim, rows = batch * length;
    Tensor *merged = nullptr, *dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch, length, width}), &merged));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({width}), &dbias));
    const T* parts[3] = {dq.flat<T>().data(), ctx->input(1).flat<T>().data(),
                         ctx->input(2).flat<T>().data()};
    T* dst = merged->flat<T>().data();
    // Column sums per sequence, added up after (sequences run on different threads). Each
    // (sequence, part, head) is read in order, its sums kept in a row of `dim` floats.
    std::vector<float> partial(batch * width, 0.f);
    run_rows(ctx, batch, length * width, 6 * length * width, [&](int64_t begin, int64_t end) {
      for (int64_t sequence = begin; sequence < end; ++sequence) {
        for (int64_t part = 0; part < 3; ++part) {
          for (int64_t head = 0; head < heads; ++head) {
            const int64_t column = (part * heads + head) * dim;
            float* __restrict sums = partial.data() + sequence * width + column;
            const T* __restrict in = parts[part] + (sequence * heads + head) * length * dim;
            T* __restrict out = dst + sequence * length * width + column;
            for (int64_t position = 0; position < length; ++position) {
#pragma omp simd
              for (int64_t i = 0; i < dim; ++i) {
                // Through float (exact both ways): a copy of T itself did not vectorize.
                const float value = widen(in[position * dim + i]);
                out[position * width + i] = narrow<T>(value);
                sums[i] += value;
              }
            }
          }
        }
      }
    });
    add_up(partial.data(), batch, width, width, dbias->flat<float>().data());
  }
};

// AdamW's update of one float32 variable in one pass over it, its two moments and its
// gradient: the gradient times `scale` (gradient clipping's factor), the decoupled weight
// decay var -= var * decay, then Adam's update as TensorFlow's ResourceApplyAdam computes
// it (the same expressions in the same order). Keras' AdamW with ResourceApplyAdam makes
// three passes where this makes one (the decay's multiply and subtract, the clipping's
// multiply, the update).
class ApplyAdamWOp : public OpKernel {
 public:
  explicit ApplyAdamWOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<tensorflow::Var> vars[3];  // the variable, m, v
    for (int i = 0; i < 3; ++i) {
      OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, i), &vars[i]));
    }
    // Locked in address order, as TensorFlow's training ops lock theirs.
    std::vector<tensorflow::mutex*> mutexes;
    for (auto& var : vars) mutexes.push_back(var->mu());
    std::sort(mutexes.begin(), mutexes.end());
    mutexes.erase(std::unique(mutexes.begin(), mutexes.end()), mutexes.end());
    for (auto* mu : mutexes) mu->lock();
    struct Unlock {
      std::vector<tensorflow::mutex*>& held;
      ~Unlock() {
        for (auto* mu : held) mu->unlock();
      }
    } unlock{mutexes};

    const Tensor& grad = ctx->input(3);
    float* data[3];
    for (int i = 0; i < 3; ++i) {
      Tensor* t = vars[i]->tensor();
      OP_REQUIRES(ctx, vars[i]->is_initialized && t->dtype() == tensorflow::DT_FLOAT,
                  tensorflow::errors::InvalidArgument("the variable and its moments must be initialized float32"));
      OP_REQUIRES(ctx, t->shape() == grad.shape(),
                  tensorflow::errors::InvalidArgument("the gradient's shape ", grad.shape().DebugString(),
                                                      " is not the variable's ", t->shape().DebugString()));
      // A read of the old value still holds the buffer: update a copy (TensorFlow's
      // PrepareToUpdateVariable does the same).
      if (vars[i]->copy_on_read_mode.load() || !t->RefCountIsOne()) {
        Tensor copy;
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, t->shape(), &copy));
        std::memcpy(copy.flat<float>().data(), t->flat<float>().data(), t->NumElements() * sizeof(float));
        *t = copy;
      }
      data[i] = t->flat<float>().data();
    }
    auto scalar = [&](int i) { return ctx->input(i).scalar<float>()(); };
    const float scale = scalar(4), decay = scalar(5), lr = scalar(6), beta1 = scalar(7),
                beta2 = scalar(8), epsilon = scalar(9), beta1_power = scalar(10),
                beta2_power = scalar(11);
    const float step = lr * std::sqrt(1.f - beta2_power) / (1.f - beta1_power);
    const float keep1 = 1.f - beta1, keep2 = 1.f - beta2;
    const float* gp = grad.flat<float>().data();
    const int64_t n = grad.NumElements();
    run_rows(ctx, n, 1, 30, [&](int64_t begin, int64_t end) {
      float* __restrict w = data[0];
      float* __restrict m = data[1];
      float* __restrict v = data[2];
      const float* __restrict g = gp;
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const float gi = g[i] * scale;
        float wi = w[i];
        wi -= wi * decay;
        const float mi = m[i] + (gi - m[i]) * keep1;
        const float vi = v[i] + (gi * gi - v[i]) * keep2;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - (mi * step) / (std::sqrt(vi) + epsilon);
      }
    });
  }
};

}  // namespace

// The shape function of an op whose one output has its first input's shape.
static absl::Status ShapeOfFirstInput(tensorflow::shape_inference::InferenceContext* c) {
  c->set_output(0, c->input(0));
  return absl::OkStatus();
}

REGISTER_OP("ElectraAddLayerNorm")
    .Input("x: T")
    .Input("residual: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Input("key: uint32")
    .Input("threshold: uint32")
    .Input("scale: float")
    .Input("bias: float")
    .Attr("T: {bfloat16, float}")
    .Attr("epsilon: float")
    .Attr("dropout: bool")
    .Output("y: T")
    .Output("inv_std: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->MakeShape({c->Dim(c->input(0), 0), 1}));
      return absl::OkStatus();
    });

REGISTER_OP("ElectraAddLayerNormGrad")
    .Input("y: T")
    .Input("upstream: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Input("key: uint32")
    .Input("threshold: uint32")
    .Input("scale: float")
    .Input("inv_std: float")
    .Attr("T: {bfloat16, float}")
    .Attr("dropout: bool")
    .Attr("with_bias: bool = false")
    .Output("dx: T")
    .Output("ds: T")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .Output("dbias: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      bool with_bias;
      TF_RETURN_IF_ERROR(c->GetAttr("with_bias", &with_bias));
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      c->set_output(2, c->Vector(c->Dim(c->input(0), 1)));
      c->set_output(3, c->Vector(c->Dim(c->input(0), 1)));
      c->set_output(4, with_bias ? c->Vector(c->Dim(c->input(0), 1)) : c->Vector(0));
      return absl::OkStatus();
    });

REGISTER_OP("ElectraBiasGelu")
    .Input("h: T")
    .Input("bias: float")
    .Attr("T: {bfloat16, float}")
    .Output("y: T")
    .SetShapeFn(ShapeOfFirstInput);

REGISTER_OP("ElectraBiasGeluGrad")
    .Input("h: T")
    .Input("bias: float")
    .Input("upstream: T")
    .Attr("T: {bfloat16, float}")
    .Attr("with_output: bool = false")
    .Output("dh: T")
    .Output("dbias: float")
    .Output("y: T")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      bool with_output;
      TF_RETURN_IF_ERROR(c->GetAttr("with_output", &with_output));
      c->set_output(0, c->input(0));
      c->set_output(1, c->Vector(c->Dim(c->input(0), 1)));
      c->set_output(2, with_output ? c->input(0) : c->Vector(0));
      return absl::OkStatus();
    });

REGISTER_OP("ElectraAttentionProbs")
    .Input("scores: T")
    .Input("keep: bool")
    .Input("key: uint32")
    .Input("threshold: uint32")
    .Input("dropout_scale: float")
    .Attr("T: {bfloat16, float}")
    .Attr("scale: float")
    .Attr("dropout: bool")
    .Output("probs: T")
    .Output("dropped: T")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      bool dropout;
      TF_RETURN_IF_ERROR(c->GetAttr("dropout", &dropout));
      c->set_output(0, c->input(0));
      c->set_output(1, dropout ? c->input(0) : c->Vector(0));
      return absl::OkStatus();
    });

REGISTER_OP("ElectraAttentionProbsGrad")
    .Input("probs: T")
    .Input("upstream: T")
    .Input("key: uint32")
    .Input("threshold: uint32")
    .Input("dropout_scale: float")
    .Attr("T: {bfloat16, float}")
    .Attr("scale: float")
    .Attr("dropout: bool")
    .Output("d_scores: T")
    .SetShapeFn(ShapeOfFirstInput);

REGISTER_OP("ElectraDropout")
    .Input("x: T")
    .Input("key: uint32")
    .Input("threshold: uint32")
    .Input("dropout_scale: float")
    .Attr("T: {bfloat16, float}")
    .Output("y: T")
    .SetShapeFn(ShapeOfFirstInput);

REGISTER_OP("ElectraSoftmaxXent")
    .Input("logits: T")
    .Input("labels: int32")
    .Input("uniform: float")
    .Attr("T: {bfloat16, float}")
    .Attr("block: int = 128")
    .Output("loss: float")
    .Output("best: int32")
    .Output("log_sum_exp: float")
    .Output("sampled: int32")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      auto rows = c->Vector(c->Dim(c->input(0), 0));
      for (int i = 0; i < 3; ++i) c->set_output(i, rows);
      c->set_output(3, c->input(2));
      return absl::OkStatus();
    });

REGISTER_OP("ElectraSoftmaxXentGrad")
    .Input("logits: T")
    .Input("log_sum_exp: float")
    .Input("labels: int32")
    .Input("upstream: float")
    .Attr("T: {bfloat16, float}")
    .Output("d_logits: T")
    .SetShapeFn(ShapeOfFirstInput);

REGISTER_OP("ElectraInverseCdf")
    .Input("probs: float")
    .Input("uniform: float")
    .Attr("block: int = 128")
    .Output("index: int32")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(c->Dim(c->input(0), 0)));
      return absl::OkStatus();
    });

REGISTER_OP("ElectraSplitHeads")
    .Input("qkv: T")
    .Input("bias: float")
    .Attr("T: {bfloat16, float}")
    .Attr("heads: int")
    .Output("q: T")
    .Output("k: T")
    .Output("v: T")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      int heads;
      TF_RETURN_IF_ERROR(c->GetAttr("heads", &heads));
      auto qkv = c->input(0);
      TF_RETURN_IF_ERROR(c->WithRank(qkv, 3, &qkv));
      tensorflow::shape_inference::DimensionHandle dim;
      TF_RETURN_IF_ERROR(c->Divide(c->Dim(qkv, 2), 3 * heads, true, &dim));
      auto shape = c->MakeShape({c->Dim(qkv, 0), c->MakeDim(heads), c->Dim(qkv, 1), dim});
      for (int i = 0; i < 3; ++i) c->set_output(i, shape);
      return absl::OkStatus();
    });

REGISTER_OP("ElectraMergeHeads")
    .Input("dq: T")
    .Input("dk: T")
    .Input("dv: T")
    .Attr("T: {bfloat16, float}")
    .Output("dqkv: T")
    .Output("dbias: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      auto dq = c->input(0);
      TF_RETURN_IF_ERROR(c->WithRank(dq, 4, &dq));
      tensorflow::shape_inference::DimensionHandle width;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(dq, 1), c->Dim(dq, 3), &width));
      TF_RETURN_IF_ERROR(c->Multiply(width, 3, &width));
      c->set_output(0, c->MakeShape({c->Dim(dq, 0), c->Dim(dq, 2), width}));
      c->set_output(1, c->Vector(width));
      return absl::OkStatus();
    });

REGISTER_OP("ElectraApplyAdamW")
    .Input("var: resource")
    .Input("m: resource")
    .Input("v: resource")
    .Input("grad: float")
    .Input("scale: float")
    .Input("decay: float")
    .Input("lr: float")
    .Input("beta1: float")
    .Input("beta2: float")
    .Input("epsilon: float")
    .Input("beta1_power: float")
    .Input("beta2_power: float")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) { return absl::OkStatus(); });

REGISTER_KERNEL_BUILDER(Name("ElectraApplyAdamW").Device(tensorflow::DEVICE_CPU), ApplyAdamWOp);

REGISTER_KERNEL_BUILDER(Name("ElectraInverseCdf").Device(tensorflow::DEVICE_CPU), InverseCdfOp);

// Each op's CPU kernel for one T (bfloat16, float).
#define REGISTER_ONE(NAME, KERNEL, T) \
  REGISTER_KERNEL_BUILDER(            \
      Name(NAME).Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), KERNEL<T>);
#define REGISTER(T)                                                  \
  REGISTER_ONE("ElectraAddLayerNorm", AddLayerNormOp, T)             \
  REGISTER_ONE("ElectraAddLayerNormGrad", AddLayerNormGradOp, T)     \
  REGISTER_ONE("ElectraBiasGelu", BiasGeluOp, T)                     \
  REGISTER_ONE("ElectraBiasGeluGrad", BiasGeluGradOp, T)             \
  REGISTER_ONE("ElectraAttentionProbs", AttentionProbsOp, T)         \
  REGISTER_ONE("ElectraAttentionProbsGrad", AttentionProbsGradOp, T) \
  REGISTER_ONE("ElectraDropout", DropoutOp, T)                       \
  REGISTER_ONE("ElectraSoftmaxXent", SoftmaxXentOp, T)               \
  REGISTER_ONE("ElectraSoftmaxXentGrad", SoftmaxXentGradOp, T)       \
  REGISTER_ONE("ElectraSplitHeads", SplitHeadsOp, T)                 \
  REGISTER_ONE("ElectraMergeHeads", MergeHeadsOp, T)
REGISTER(float)
REGISTER(Eigen::bfloat16)
