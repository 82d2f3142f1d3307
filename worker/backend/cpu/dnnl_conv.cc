#include "worker/backend/cpu/dnnl_conv.h"

#include <omp.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

bool ValidShape(const DirectConvShape& s) {
  return s.max_rows >= 1 && s.height >= 1 && s.width >= 1 && s.in_c >= 1 &&
         s.filters >= 1 && s.kernel >= 1 && s.kernel % 2 == 1;
}

}  // namespace

struct DnnlConv::Prims {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc bwd_d_pd;
  dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_d;
  dnnl::convolution_backward_weights bwd_w;
  // The weights in fwd's and bwd_d's layouts (one memory when they agree),
  // filled by Forward; the weight gradient in bwd_w's layout and the bias
  // gradient (for beta 1).
  memory w_fwd, w_bwd, dw, db;
  // dw -> the caller's layout, overwriting (beta 0) or adding (beta 1).
  dnnl::reorder dw_set, dw_add;
  dnnl::reorder w_to_fwd, w_to_bwd;
  memory user_w, user_dw;  // handles re-pointed at each call
};

DnnlConv::DnnlConv(const DirectConvShape& shape, int threads,
                   std::function<void(absl::Status)> record)
    : shape_(shape),
      threads_(threads),
      record_(std::move(record)),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_) {}

DnnlConv::~DnnlConv() = default;

absl::StatusOr<std::unique_ptr<DnnlConv>> DnnlConv::Create(
    const DirectConvShape& shape, int threads,
    std::function<void(absl::Status)> record) {
  if (!ValidShape(shape) || threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DnnlConv: bad shape or threads (rows ", shape.max_rows, ", ",
        shape.height, "x", shape.width, "x", shape.in_c, ", kernel ",
        shape.kernel, ", filters ", shape.filters, ", threads ", threads, ")"));
  }
  absl::Status error;
  auto keep = [&error](absl::Status s) {
    if (error.ok()) error = std::move(s);
  };
  std::unique_ptr<DnnlConv> conv;
  try {
    conv.reset(new DnnlConv(shape, threads, keep));
    conv->PrimsFor(shape.max_rows);  // fails here, not at the first step
  } catch (const dnnl::error& e) {
    return absl::UnimplementedError(absl::StrCat("oneDNN: ", e.what()));
  }
  if (!error.ok()) return error;
  conv->record_ = std::move(record);
  return conv;
}

DnnlConv::Prims* DnnlConv::PrimsFor(int rows) {
  auto it = prims_.find(rows);
  if (it != prims_.end()) return it->second.get();
  omp_set_num_threads(threads_);  // implementations are picked for it
  const DirectConvShape& s = shape_;
  const memory::dims src{rows, s.in_c, s.height, s.width};
  const memory::dims dst{rows, s.filters, s.height, s.width};
  const memory::dims wei{s.filters, s.in_c, s.kernel, s.kernel};
  const memory::dims bias{s.filters};
  const memory::dims stride{1, 1};
  const memory::dims pad{(s.kernel - 1) / 2, (s.kernel - 1) / 2};
  const memory::desc src_md(src, kF32, Tag::nhwc);
  const memory::desc dst_md(dst, kF32, Tag::nhwc);
  const memory::desc wei_any(wei, kF32, Tag::any);
  const memory::desc wei_user(wei, kF32, Tag::ihwo);
  const memory::desc bias_md(bias, kF32, Tag::x);
  try {
    auto p = std::make_unique<Prims>();
    dnnl::post_ops relu;
    relu.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    dnnl::primitive_attr fwd_attr;
    fwd_attr.set_post_ops(relu);
    p->fwd_pd = dnnl::convolution_forward::primitive_desc(
        {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
         src_md, wei_any, bias_md, dst_md, stride, pad, pad},
        fwd_attr, engine_);
    p->bwd_d_pd = dnnl::convolution_backward_data::primitive_desc(
        {dnnl::algorithm::convolution_direct, src_md, wei_any, dst_md, stride,
         pad, pad},
        engine_, p->fwd_pd);
    p->bwd_w_pd = dnnl::convolution_backward_weights::primitive_desc(
        {dnnl::algorithm::convolution_direct, src_md, wei_any, bias_md, dst_md,
         stride, pad, pad},
        engine_, p->fwd_pd);
    p->fwd = dnnl::convolution_forward(p->fwd_pd);
    p->bwd_d = dnnl::convolution_backward_data(p->bwd_d_pd);
    p->bwd_w = dnnl::convolution_backward_weights(p->bwd_w_pd);
    p->user_w = memory(wei_user, engine_, DNNL_MEMORY_NONE);
    p->user_dw = memory(wei_user, engine_, DNNL_MEMORY_NONE);
    p->w_fwd = memory(p->fwd_pd.weights_desc(), engine_);
    p->w_to_fwd = dnnl::reorder(p->user_w, p->w_fwd);
    if (p->bwd_d_pd.weights_desc() == p->fwd_pd.weights_desc()) {
      p->w_bwd = p->w_fwd;
    } else {
      p->w_bwd = memory(p->bwd_d_pd.weights_desc(), engine_);
      p->w_to_bwd = dnnl::reorder(p->user_w, p->w_bwd);
    }
    p->dw = memory(p->bwd_w_pd.diff_weights_desc(), engine_);
    p->db = memory(bias_md, engine_);
    p->dw_set = dnnl::reorder(p->dw, p->user_dw);
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    dnnl::primitive_attr add_attr;
    add_attr.set_post_ops(sum);
    p->dw_add = dnnl::reorder(
        dnnl::reorder::primitive_desc(p->dw, p->user_dw, add_attr));
    Prims* raw = p.get();
    prims_.emplace(rows, std::move(p));
    return raw;
  } catch (const dnnl::error& e) {
    record_(absl::InternalError(absl::StrCat(
        "DnnlConv: cannot create primitives for ", rows, " rows: ", e.what())));
    return nullptr;
  }
}

std::string DnnlConv::ImplNames() {
  Prims* p = PrimsFor(shape_.max_rows);
  if (p == nullptr) return "";
  return absl::StrCat("fwd ", p->fwd_pd.impl_info_str(), ", bwd_d ",
                      p->bwd_d_pd.impl_info_str(), ", bwd_w ",
                      p->bwd_w_pd.impl_info_str());
}

bool DnnlConv::CheckRows(const char* op, int rows) {
  if (rows >= 1 && rows <= shape_.max_rows) return true;
  record_(absl::InvalidArgumentError(
      absl::StrCat("DnnlConv::", op, ": rows must be in [1, ", shape_.max_rows,
                   "], got ", rows)));
  return false;
}

void DnnlConv::Forward(int rows, const float* x, const float* w, const float* b,
                       float* y) {
  if (!CheckRows("Forward", rows)) return;
  Prims* p = PrimsFor(rows);
  if (p == nullptr) return;
  omp_set_num_threads(threads_);
  try {
    p->user_w.set_data_handle(const_cast<float*>(w));
    p->w_to_fwd.execute(stream_, p->user_w, p->w_fwd);
    if (shape_.input_grad && p->w_bwd != p->w_fwd) {
      p->w_to_bwd.execute(stream_, p->user_w, p->w_bwd);
    }
    memory src(p->fwd_pd.src_desc(), engine_, const_cast<float*>(x));
    memory bias(p->fwd_pd.bias_desc(), engine_, const_cast<float*>(b));
    memory dst(p->fwd_pd.dst_desc(), engine_, y);
    p->fwd.execute(stream_, {{DNNL_ARG_SRC, src},
                             {DNNL_ARG_WEIGHTS, p->w_fwd},
                             {DNNL_ARG_BIAS, bias},
                             {DNNL_ARG_DST, dst}});
    stream_.wait();
    last_forward_ = p;
  } catch (const dnnl::error& e) {
    record_(absl::InternalError(absl::StrCat("DnnlConv::Forward: ", e.what())));
  }
}

void DnnlConv::BackwardData(int rows, const float* dy, float* dx) {
  if (!CheckRows("BackwardData", rows)) return;
  Prims* p = PrimsFor(rows);
  if (p == nullptr) return;
  if (p != last_forward_ || !shape_.input_grad) {
    return record_(absl::FailedPreconditionError(
        "DnnlConv::BackwardData: needs a Forward with as many rows first, on "
        "a conv created with input_grad"));
  }
  omp_set_num_threads(threads_);
  try {
    memory diff_dst(p->bwd_d_pd.diff_dst_desc(), engine_,
                    const_cast<float*>(dy));
    memory diff_src(p->bwd_d_pd.diff_src_desc(), engine_, dx);
    p->bwd_d.execute(stream_, {{DNNL_ARG_DIFF_DST, diff_dst},
                               {DNNL_ARG_WEIGHTS, p->w_bwd},
                               {DNNL_ARG_DIFF_SRC, diff_src}});
    stream_.wait();
  } catch (const dnnl::error& e) {
    record_(absl::InternalError(
        absl::StrCat("DnnlConv::BackwardData: ", e.what())));
  }
}

void DnnlConv::BackwardWeights(int rows, const float* x, const float* dy,
                               float beta, float* dw, float* db) {
  if (!CheckRows("BackwardWeights", rows)) return;
  Prims* p = PrimsFor(rows);
  if (p == nullptr) return;
  omp_set_num_threads(threads_);
  try {
    memory src(p->bwd_w_pd.src_desc(), engine_, const_cast<float*>(x));
    memory diff_dst(p->bwd_w_pd.diff_dst_desc(), engine_,
                    const_cast<float*>(dy));
    const bool add = beta != 0.0f;
    memory diff_bias =
        add ? p->db : memory(p->bwd_w_pd.diff_bias_desc(), engine_, db);
    p->bwd_w.execute(stream_, {{DNNL_ARG_SRC, src},
                               {DNNL_ARG_DIFF_DST, diff_dst},
                               {DNNL_ARG_DIFF_WEIGHTS, p->dw},
                               {DNNL_ARG_DIFF_BIAS, diff_bias}});
    p->user_dw.set_data_handle(dw);
    (add ? p->dw_add : p->dw_set).execute(stream_, p->dw, p->user_dw);
    stream_.wait();
    if (add) {
      const float* part = static_cast<const float*>(p->db.get_data_handle());
      for (int f = 0; f < shape_.filters; ++f) db[f] += part[f];
    }
  } catch (const dnnl::error& e) {
    record_(absl::InternalError(
        absl::StrCat("DnnlConv::BackwardWeights: ", e.what())));
  }
}

}  // namespace ps
