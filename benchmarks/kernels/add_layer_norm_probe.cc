// A hand-written residual add + LayerNorm forward for bfloat16 rows (no dropout), compiled
// by benchmarks/kernel_times.py --compiled: what a compiled kernel reaches on this CPU
// against the XLA kernel in keras_electra/layers/fused.py. Not used by the library.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

REGISTER_OP("ProbeAddLayerNorm")
    .Input("x: bfloat16")
    .Input("residual: bfloat16")
    .Input("gamma: float")
    .Input("beta: float")
    .Attr("epsilon: float")
    .Output("y: bfloat16")
    .Output("inv_std: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->MakeShape({c->Dim(c->input(0), 0), 1}));
      return OkStatus();
    });

static inline float widen(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t narrow(float f) {  // round to nearest even (finite values)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

class ProbeAddLayerNormOp : public OpKernel {
 public:
  explicit ProbeAddLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& r = ctx->input(1);
    const int64_t rows = x.dim_size(0), width = x.dim_size(1);
    Tensor *y = nullptr, *inv = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({rows, 1}), &inv));
    const uint16_t* xp = reinterpret_cast<const uint16_t*>(x.tensor_data().data());
    const uint16_t* rp = reinterpret_cast<const uint16_t*>(r.tensor_data().data());
    const float* g = ctx->input(2).flat<float>().data();
    const float* b = ctx->input(3).flat<float>().data();
    uint16_t* yp = reinterpret_cast<uint16_t*>(const_cast<char*>(y->tensor_data().data()));
    float* ip = inv->flat<float>().data();
    const float eps = epsilon_;
    auto work = [&](int64_t begin, int64_t end) {
      std::vector<float> s(width);
      float* sp = s.data();
      for (int64_t row = begin; row < end; ++row) {
        const uint16_t* xr = xp + row * width;
        const uint16_t* rr = rp + row * width;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < width; ++i) {
          float v = widen(xr[i]) + widen(rr[i]);
          sp[i] = v;
          sum += v;
        }
        const float mean = sum / width;
        float sq = 0.f;
#pragma omp simd reduction(+ : sq)
        for (int64_t i = 0; i < width; ++i) {
          float c = sp[i] - mean;
          sq += c * c;
        }
        const float is = 1.f / std::sqrt(sq / width + eps);
        ip[row] = is;
        uint16_t* yr = yp + row * width;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) yr[i] = narrow((sp[i] - mean) * is * g[i] + b[i]);
      }
    };
    auto pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    pool->ParallelFor(rows, 20 * width, work);
  }

 private:
  float epsilon_;
};

REGISTER_KERNEL_BUILDER(Name("ProbeAddLayerNorm").Device(DEVICE_CPU), ProbeAddLayerNormOp);
