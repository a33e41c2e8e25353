// algosel's compiled runtime path, the PyTorch side: the hooked convolution's autograd Function in C++, running
// the cuDNN plans the selector chose (plan.cpp) or PyTorch's own kernel, direction by direction.
//
// The Python side plans (chooses a candidate and builds its plan with the cuDNN frontend's Python API) and hands
// the built plan over as the frontend's serialized blob (`load_plan`). A *route* bundles the plans of one
// convolution's three directions (-1: PyTorch's own kernel for that direction) with its geometry
// (`register_route`); `run_route` is the per-call entry point: one call from Python, no Python in backward.
//
// Built by `algosel build-ext` with torch.utils.cpp_extension (algosel/runtime/native.py) where a compiler, CUDA's
// and cuDNN's headers exist; without it the runtime uses its Python path.

#include <torch/extension.h>

#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plan.h"

namespace {

enum Direction : int64_t { kFwd = 0, kBwdData = 1, kBwdFilter = 2 };

struct Plan {
  algosel::CudnnPlan* cudnn = nullptr;  // owned for the process's lifetime
  int64_t direction = kFwd;
  std::vector<int64_t> out_sizes, out_strides;  // of the tensor the direction writes
  int64_t workspace_bytes = 0;
  int device = 0;
};

struct Route {
  int64_t plan[3] = {-1, -1, -1};  // per direction: a plan id, or -1 for PyTorch's own kernel
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
  bool channels_last = false;
};

// Plans and routes are only appended; entries are never freed (they live as long as the process's planned
// convolutions), so a pointer read under the lock stays valid after it.
std::mutex g_mutex;
std::vector<std::unique_ptr<Plan>> g_plans;
std::vector<std::unique_ptr<Route>> g_routes;

const Plan* plan_at(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(g_plans.size()), "algosel: no such plan: ", id);
  return g_plans[id].get();
}

const Route* route_at(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(g_routes.size()), "algosel: no such route: ", id);
  return g_routes[id].get();
}

int64_t load_plan(const py::bytes& blob, int64_t uid_x, int64_t uid_w, int64_t uid_y, int64_t direction,
                  std::vector<int64_t> out_sizes, std::vector<int64_t> out_strides, int64_t device) {
  TORCH_CHECK(direction >= kFwd && direction <= kBwdFilter, "algosel: direction must be 0, 1 or 2");
  std::string bytes = blob;
  std::string error;
  algosel::CudnnPlan* cudnn = algosel::plan_load(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                                 uid_x, uid_w, uid_y, static_cast<int>(device), &error);
  TORCH_CHECK(cudnn != nullptr, "algosel: ", error);
  auto plan = std::make_unique<Plan>();
  plan->cudnn = cudnn;
  plan->direction = direction;
  plan->out_sizes = std::move(out_sizes);
  plan->out_strides = std::move(out_strides);
  plan->workspace_bytes = algosel::plan_workspace_bytes(cudnn);
  plan->device = static_cast<int>(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_plans.push_back(std::move(plan));
  return static_cast<int64_t>(g_plans.size() - 1);
}

// Run a plan on (x, w, y); the tensor the direction writes (y, x or w) is allocated here and returned.
at::Tensor execute(const Plan& plan, at::Tensor x, at::Tensor w, at::Tensor y) {
  const at::Tensor& like = plan.direction == kBwdData ? y : x;
  at::Tensor out = at::empty_strided(plan.out_sizes, plan.out_strides, like.options());
  if (plan.direction == kFwd) {
    y = out;
  } else if (plan.direction == kBwdData) {
    x = out;
  } else {
    w = out;
  }
  // Workspace from PyTorch's caching allocator, on the current stream: many plans do not each hold their own.
  at::Tensor workspace;
  if (plan.workspace_bytes > 0) workspace = at::empty({plan.workspace_bytes}, like.options().dtype(at::kByte));
  void* stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(plan.device)).stream();
  std::string error;
  bool ok = algosel::plan_execute(plan.cudnn, x.data_ptr(), w.data_ptr(), y.data_ptr(),
                                  plan.workspace_bytes > 0 ? workspace.data_ptr() : nullptr, stream, &error);
  TORCH_CHECK(ok, "algosel: ", error);
  return out;
}

at::Tensor run_plan(int64_t id, const at::Tensor& a, const at::Tensor& b) {
  // a, b: the direction's inputs in algosel's order: (x, w) fwd, (dy, w) bwd_data, (x, dy) bwd_filter.
  const Plan& plan = *plan_at(id);
  if (plan.direction == kFwd) return execute(plan, a, b, at::Tensor());
  if (plan.direction == kBwdData) return execute(plan, at::Tensor(), b, a);
  return execute(plan, a, at::Tensor(), b);
}

int64_t register_route(int64_t fwd, int64_t bwd_data, int64_t bwd_filter, std::vector<int64_t> stride,
                       std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups,
                       bool channels_last) {
  for (int64_t id : {fwd, bwd_data, bwd_filter}) {
    if (id >= 0) plan_at(id);  // validates the id
  }
  auto route = std::make_unique<Route>();
  route->plan[kFwd] = fwd;
  route->plan[kBwdData] = bwd_data;
  route->plan[kBwdFilter] = bwd_filter;
  route->stride = std::move(stride);
  route->padding = std::move(padding);
  route->dilation = std::move(dilation);
  route->groups = groups;
  route->channels_last = channels_last;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_routes.push_back(std::move(route));
  return static_cast<int64_t>(g_routes.size() - 1);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ConvFunction : public torch::autograd::Function<ConvFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias, int64_t route_id) {
    const Route& r = *route_at(route_id);
    const auto mf = r.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    at::Tensor x = input.contiguous(mf), w = weight.contiguous(mf);
    const bool has_bias = bias.has_value() && bias->defined();
    at::Tensor y;
    if (r.plan[kFwd] >= 0) {
      y = execute(*plan_at(r.plan[kFwd]), x, w, at::Tensor());
      if (has_bias) y.add_(bias->view({1, -1, 1, 1}));  // y is a fresh output: adding in place is safe
    } else {
      y = at::convolution(x, w, bias, r.stride, r.padding, r.dilation, false, {0, 0}, r.groups);
    }
    ctx->save_for_backward({x, w});
    ctx->saved_data["route"] = route_id;
    ctx->saved_data["bias"] = has_bias;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Route& r = *route_at(ctx->saved_data["route"].toInt());
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const auto mf = r.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    at::Tensor gy = grads[0].contiguous(mf);
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    // needs_input_grad indexes the tensor inputs that were given: bias is the third only where it was given.
    const bool need_b = ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2);
    // A differentiable backward (double backward: grad mode is on here) is PyTorch's own, which has one; the
    // directions PyTorch computes are asked of it in one call, with both mask bits, as autograd would.
    const bool differentiable = at::GradMode::is_enabled();
    const bool native_x = need_x && (differentiable || r.plan[kBwdData] < 0);
    const bool native_w = need_w && (differentiable || r.plan[kBwdFilter] < 0);
    at::Tensor gx, gw, gb;
    if (native_x || native_w) {
      auto out = at::convolution_backward(gy, x, w, c10::nullopt, r.stride, r.padding, r.dilation, false, {0, 0},
                                          r.groups, {native_x, native_w, false});
      if (native_x) gx = std::get<0>(out);
      if (native_w) gw = std::get<1>(out);
    }
    if (need_x && !native_x) gx = execute(*plan_at(r.plan[kBwdData]), at::Tensor(), w, gy);
    if (need_w && !native_w) gw = execute(*plan_at(r.plan[kBwdFilter]), x, at::Tensor(), gy);
    if (need_b) gb = gy.sum({0, 2, 3});
    return {gx, gw, gb, at::Tensor()};
  }
};

at::Tensor run_route(int64_t route_id, const at::Tensor& input, const at::Tensor& weight,
                     const c10::optional<at::Tensor>& bias) {
  return ConvFunction::apply(input, weight, bias, route_id);
}

int64_t workspace_bytes(int64_t plan_id) { return plan_at(plan_id)->workspace_bytes; }

int64_t plan_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(g_plans.size());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "algosel's compiled runtime path: cuDNN plans and the convolution autograd Function in C++";
  m.def("load_plan", &load_plan, "deserialize a plan built by the cuDNN frontend's Python API; returns its id",
        py::arg("blob"), py::arg("uid_x"), py::arg("uid_w"), py::arg("uid_y"), py::arg("direction"),
        py::arg("out_sizes"), py::arg("out_strides"), py::arg("device"));
  m.def("run_plan", &run_plan, "run a plan on its direction's two inputs; returns the output", py::arg("plan"),
        py::arg("a"), py::arg("b"));
  m.def("register_route", &register_route, "a convolution's plans per direction (-1: PyTorch's) and geometry",
        py::arg("fwd"), py::arg("bwd_data"), py::arg("bwd_filter"), py::arg("stride"), py::arg("padding"),
        py::arg("dilation"), py::arg("groups"), py::arg("channels_last"));
  m.def("run_route", &run_route, "the hooked convolution: forward now, its gradients in autograd's backward",
        py::arg("route"), py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  m.def("workspace_bytes", &workspace_bytes, py::arg("plan"));
  m.def("plan_count", &plan_count);
}
