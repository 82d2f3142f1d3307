#include "worker/model/internal/conv_stack.h"

#include <algorithm>

#include "worker/model/internal/buffer_alloc.h"

namespace ps {
namespace model_internal {
namespace {

ImageShape Image(int rows, uint32_t h, uint32_t w, uint32_t c) {
  return ImageShape{rows, static_cast<int>(h), static_cast<int>(w),
                    static_cast<int>(c)};
}

}  // namespace

ConvStack::ConvStack(Backend* backend,
                     const std::vector<ConvLayerShape>& layers, size_t max_rows,
                     size_t tune_rows)
    : backend_(backend),
      max_rows_(max_rows),
      tune_rows_(tune_rows == 0 ? max_rows : std::min(tune_rows, max_rows)) {
  size_t offset = 0;
  for (const ConvLayerShape& shape : layers) {
    ConvStage s;
    s.shape = shape;
    s.w_offset = offset;
    offset += static_cast<size_t>(s.row_len()) * shape.filters;
    s.b_offset = offset;
    offset += shape.filters;
    stages_.push_back(s);
    max_act_ = std::max(max_act_, s.act_size());
    max_out_ = std::max(max_out_, s.out_size());
  }
  num_parameters_ = offset;
}

void ConvStack::PickKernels() {
  const size_t n = stages_.size();
  direct_.resize(n);
  inputs_.assign(n, nullptr);
  choices_.clear();
  for (size_t l = 0; l < n; ++l) {
    const ConvLayerShape& sh = stages_[l].shape;
    const DirectConvShape shape{
        static_cast<int>(max_rows_),  static_cast<int>(sh.in_h),
        static_cast<int>(sh.in_w),    static_cast<int>(sh.in_c),
        static_cast<int>(sh.filters), static_cast<int>(sh.kernel),
        /*input_grad=*/l > 0,         static_cast<int>(tune_rows_)};
    std::string choice;
    direct_[l] = backend_->CreateDirectConv(shape, &choice);
    if (!choice.empty()) choices_.push_back(std::move(choice));
    if (direct_[l] != nullptr) continue;
    // The im2col path's three GEMMs (forward, dW, d_cols).
    const int pixels = shape.tune_rows * shape.height * shape.width;
    const int k = stages_[l].row_len();
    for (const std::string& c :
         {backend_->PrepareGemm(Transpose::kNo, Transpose::kNo, pixels,
                                shape.filters, k),
          backend_->PrepareGemm(Transpose::kYes, Transpose::kNo, k,
                                shape.filters, pixels),
          shape.input_grad
              ? backend_->PrepareGemm(Transpose::kNo, Transpose::kYes, pixels,
                                      k, shape.filters)
              : std::string()}) {
      if (!c.empty()) choices_.push_back(c);
    }
  }
}

absl::Status ConvStack::Allocate() {
  PickKernels();
  absl::Status s;
  const size_t n = stages_.size();
  cols_.resize(n);
  act_.resize(n);
  pooled_.resize(n);
  arg_.resize(n);
  for (size_t l = 0; l < n; ++l) {
    const ConvStage& st = stages_[l];
    if (direct_[l] == nullptr) {
      AllocInto(backend_,
                max_rows_ * st.shape.in_h * st.shape.in_w * st.row_len(),
                &cols_[l], &s);
    }
    AllocInto(backend_, max_rows_ * st.act_size(), &act_[l], &s);
    if (st.shape.pool > 1) {
      AllocInto(backend_, max_rows_ * st.out_size(), &pooled_[l], &s);
      AllocInto(backend_, max_rows_ * st.out_size(), &arg_[l], &s);
    }
  }
  AllocInto(backend_, max_rows_ * max_act_, &d_act_, &s);
  return s;
}

const float* ConvStack::output(size_t l) const {
  return stages_[l].shape.pool > 1 ? pooled_[l].data() : act_[l].data();
}

void ConvStack::Forward(size_t l, const float* params, const float* in,
                        int rows) {
  const ConvStage& st = stages_[l];
  const ConvLayerShape& sh = st.shape;
  const int pixels = rows * static_cast<int>(sh.in_h * sh.in_w);
  const int filters = static_cast<int>(sh.filters);
  inputs_[l] = in;
  if (direct_[l] != nullptr) {
    direct_[l]->Forward(rows, in, params + st.w_offset, params + st.b_offset,
                        act_[l].data());
  } else {
    backend_->Im2Col(Image(rows, sh.in_h, sh.in_w, sh.in_c),
                     static_cast<int>(sh.kernel), in, cols_[l].data());
    backend_->Gemm(Transpose::kNo, Transpose::kNo, pixels, filters,
                   st.row_len(), 1.0f, cols_[l].data(), st.row_len(),
                   params + st.w_offset, filters, 0.0f, act_[l].data(),
                   filters);
    backend_->BiasRelu(pixels, filters, params + st.b_offset, act_[l].data());
  }
  if (sh.pool > 1) {
    backend_->MaxPool(Image(rows, sh.in_h, sh.in_w, sh.filters),
                      static_cast<int>(sh.pool), act_[l].data(),
                      pooled_[l].data(), arg_[l].data());
  }
}

void ConvStack::Backward(size_t l, const float* params, int rows, float* d_out,
                         float* grad, float beta, float* d_in) {
  const ConvStage& st = stages_[l];
  const ConvLayerShape& sh = st.shape;
  const int pixels = rows * static_cast<int>(sh.in_h * sh.in_w);
  const int filters = static_cast<int>(sh.filters);
  float* d_act = d_out;
  if (sh.pool > 1) {
    d_act = d_act_.data();
    backend_->MaxPoolBackward(Image(rows, sh.in_h, sh.in_w, sh.filters),
                              static_cast<int>(sh.pool), arg_[l].data(), d_out,
                              d_act);
  }
  backend_->ReluBackward(static_cast<size_t>(pixels) * filters, act_[l].data(),
                         d_act, d_act);
  if (direct_[l] != nullptr) {
    direct_[l]->BackwardWeights(rows, inputs_[l], d_act, beta,
                                grad + st.w_offset, grad + st.b_offset);
    if (d_in != nullptr) direct_[l]->BackwardData(rows, d_act, d_in);
    return;
  }
  // dW = cols^T d_act, db = column sums of d_act.
  backend_->Gemm(Transpose::kYes, Transpose::kNo, st.row_len(), filters, pixels,
                 1.0f, cols_[l].data(), st.row_len(), d_act, filters, beta,
                 grad + st.w_offset, filters);
  backend_->ColumnSums(pixels, filters, 1.0f, d_act, beta, grad + st.b_offset);
  if (d_in == nullptr) return;
  // d_cols = d_act W^T overwrites the patches (read for the last time above),
  // then Col2Im sums them back onto the input pixels.
  backend_->Gemm(Transpose::kNo, Transpose::kYes, pixels, st.row_len(), filters,
                 1.0f, d_act, filters, params + st.w_offset, filters, 0.0f,
                 cols_[l].data(), st.row_len());
  backend_->Col2Im(Image(rows, sh.in_h, sh.in_w, sh.in_c),
                   static_cast<int>(sh.kernel), cols_[l].data(), d_in);
}

}  // namespace model_internal
}  // namespace ps
