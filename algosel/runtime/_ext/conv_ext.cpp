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

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
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

// ----------------------------------------------------------------------------------------- the dispatch table
// Everything a route depends on, as integers. 4-D tensors only (anything else misses and goes to Python).
constexpr int kKeyLength = 38;
using Key = std::array<int64_t, kKeyLength>;

struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t v : k) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// kNative: PyTorch's conv2d; kCompiled: a route of cuDNN plans; kGemmFc / kGemmPointwiseNhwc: the convolution as one
// matrix product on views (fully connected mode; 1x1 stride-1 in NHWC), differentiable in aten as nn.Linear is.
enum RouteKind : int64_t { kNative = 0, kCompiled = 1, kGemmFc = 2, kGemmPointwiseNhwc = 3 };

struct Entry {
  int64_t kind = kNative;
  int64_t route = -1;
  int64_t calls = 0;
};

// An int or a sequence of one or two ints (what F.conv2d accepts); false for anything else ("same" padding...).
bool read_pair(PyObject* obj, int64_t* a, int64_t* b) {
  if (PyLong_Check(obj)) {
    *a = *b = PyLong_AsLongLong(obj);
    return !PyErr_Occurred();
  }
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  if (n != 1 && n != 2) return false;
  PyObject** items = PySequence_Fast_ITEMS(obj);
  if (!PyLong_Check(items[0]) || !PyLong_Check(items[n - 1])) return false;
  *a = PyLong_AsLongLong(items[0]);
  *b = PyLong_AsLongLong(items[n - 1]);
  return !PyErr_Occurred();
}

// A plain tensor argument: exactly a torch.Tensor or a Parameter, with no torch-function mode active. Subclasses
// (which may override __torch_function__) and modes go to Python, which honours them.
const at::Tensor* read_tensor(PyObject* obj) {
  if (!THPVariable_CheckExact(obj) || at::impl::torch_function_mode_enabled()) return nullptr;
  return &THPVariable_Unpack(obj);
}

void put_tensor(int64_t* k, const at::Tensor& t) {
  for (int i = 0; i < 4; ++i) {
    k[i] = t.size(i);
    k[4 + i] = t.stride(i);
  }
  k[8] = static_cast<int64_t>(t.scalar_type());
  k[9] = static_cast<int64_t>(t.device().type());
  k[10] = t.device().index();
}

struct Call {
  const at::Tensor* x = nullptr;
  const at::Tensor* w = nullptr;
  const at::Tensor* b = nullptr;
  int64_t stride[2], padding[2], dilation[2], groups = 1;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kFloat;
  Key key;
};

// Reads a call and its key; false where the table cannot hold it (Python's path decides).
bool read_call(py::handle x, py::handle w, py::handle b, py::handle stride, py::handle padding,
               py::handle dilation, py::handle groups, Call* c) {
  c->x = read_tensor(x.ptr());
  c->w = read_tensor(w.ptr());
  if (c->x == nullptr || c->w == nullptr || c->x->dim() != 4 || c->w->dim() != 4) return false;
  if (!b.is_none()) {
    c->b = read_tensor(b.ptr());
    if (c->b == nullptr || c->b->dim() != 1) return false;
  }
  if (!read_pair(stride.ptr(), &c->stride[0], &c->stride[1]) ||
      !read_pair(padding.ptr(), &c->padding[0], &c->padding[1]) ||
      !read_pair(dilation.ptr(), &c->dilation[0], &c->dilation[1]) || !PyLong_Check(groups.ptr())) {
    PyErr_Clear();
    return false;
  }
  c->groups = PyLong_AsLongLong(groups.ptr());
  const at::DeviceType device = c->x->device().type();
  c->autocast = at::autocast::is_autocast_enabled(device);
  if (c->autocast) c->autocast_dtype = at::autocast::get_autocast_dtype(device);
  const bool grad = at::GradMode::is_enabled();
  int64_t* k = c->key.data();
  put_tensor(k, *c->x);
  put_tensor(k + 11, *c->w);
  k[22] = c->b == nullptr ? -1 : c->b->size(0);
  k[23] = c->b == nullptr ? -1 : static_cast<int64_t>(c->b->scalar_type());
  k[24] = c->b == nullptr ? -1 : static_cast<int64_t>(c->b->device().type()) * 1024 + c->b->device().index();
  k[25] = c->stride[0];
  k[26] = c->stride[1];
  k[27] = c->padding[0];
  k[28] = c->padding[1];
  k[29] = c->dilation[0];
  k[30] = c->dilation[1];
  k[31] = c->groups;
  k[32] = grad && c->x->requires_grad();
  k[33] = grad && c->w->requires_grad();
  k[34] = c->autocast ? static_cast<int64_t>(c->autocast_dtype) : -1;
  k[35] = at::globalContext().allowTF32CuDNN();
  k[36] = at::globalContext().allowTF32CuBLAS();
  // Deterministic convolutions asked for: the Python side routes such calls to PyTorch's own kernel.
  k[37] = at::globalContext().deterministicCuDNN() || at::globalContext().deterministicAlgorithms();
  return true;
}

// `t` as a matrix of `rows` rows: a plain view where its memory is contiguous (one op; reshape would first work out
// whether it can view, then view), else reshape's copy.
at::Tensor as_rows(const at::Tensor& t, int64_t rows) {
  return t.is_contiguous() ? t.view({rows, -1}) : t.reshape({rows, -1});
}

// The forward as algosel.spaces.gemm.gemm_conv computes it (the same views and products, so the same results).
at::Tensor gemm_forward(int64_t kind, const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3), k = w.size(0);
  const bool nhwc = kind == kGemmPointwiseNhwc || (x.is_contiguous(at::MemoryFormat::ChannelsLast) &&
                                                    !x.is_contiguous());
  at::Tensor rows, wm;
  if (kind == kGemmFc) {
    rows = as_rows(nhwc ? x.permute({0, 2, 3, 1}) : x, n);
    wm = as_rows(nhwc ? w.permute({0, 2, 3, 1}) : w, k);
  } else {  // channels_last x: (N*H*W, C) is a plain view (the signature fixed its strides); fewer ops than reshape
    rows = x.permute({0, 2, 3, 1}).view({-1, c});
    wm = as_rows(w, k);
  }
  at::Tensor y2 = b.has_value() ? at::addmm(*b, rows, wm.t()) : at::matmul(rows, wm.t());
  // y2 is a new contiguous (n, k) matrix (or (n*h*w, k)): views, not reshapes
  if (kind == kGemmFc) return nhwc ? y2.view({n, 1, 1, k}).permute({0, 3, 1, 2}) : y2.view({n, k, 1, 1});
  return y2.view({n, h, wd, k}).permute({0, 3, 1, 2});
}

class RouteTable {
 public:
  // Holds the call's signature from now on; returns the entry's slot, or -1 where the call cannot be keyed.
  int64_t add(py::handle x, py::handle w, py::handle b, py::handle stride, py::handle padding, py::handle dilation,
              py::handle groups, int64_t kind, int64_t route) {
    TORCH_CHECK(kind >= kNative && kind <= kGemmPointwiseNhwc, "algosel: route kind must be 0 to 3, got ", kind);
    if (kind == kCompiled) route_at(route);  // validates the id
    Call c;
    if (!read_call(x, w, b, stride, padding, dilation, groups, &c)) return -1;
    auto found = slots_.find(c.key);
    if (found != slots_.end()) {
      entries_[found->second].kind = kind;
      entries_[found->second].route = route;
      return found->second;
    }
    entries_.push_back(Entry{kind, route, 0});
    slots_.emplace(c.key, static_cast<int64_t>(entries_.size() - 1));
    return static_cast<int64_t>(entries_.size() - 1);
  }

  // The call run by its route, or None where the table does not hold its signature.
  py::object run(py::handle x, py::handle w, py::handle b, py::handle stride, py::handle padding,
                 py::handle dilation, py::handle groups) {
    Call c;
    if (!read_call(x, w, b, stride, padding, dilation, groups, &c)) return py::none();
    auto found = slots_.find(c.key);
    if (found == slots_.end()) return py::none();
    Entry& e = entries_[found->second];
    ++e.calls;
    const int64_t kind = e.kind, route = e.route;  // the GIL is released below: nothing in the table is held
    const c10::optional<at::Tensor> bias = c.b == nullptr ? c10::nullopt : c10::optional<at::Tensor>(*c.b);
    at::Tensor out;
    {
      py::gil_scoped_release no_gil;  // as PyTorch's own binding of conv2d does
      if (kind == kNative) {
        // The uncast tensors: autocast casts them itself (and reuses its cache of cast weights).
        out = at::conv2d(*c.x, *c.w, bias, {c.stride[0], c.stride[1]}, {c.padding[0], c.padding[1]},
                         {c.dilation[0], c.dilation[1]}, c.groups);
      } else {
        at::Tensor xi = *c.x, wi = *c.w;
        c10::optional<at::Tensor> bi = bias;
        if (c.autocast) {  // what autocast would give conv2d: its dtype, then no autocast below
          xi = xi.to(c.autocast_dtype);
          wi = wi.to(c.autocast_dtype);
          if (bi.has_value()) bi = bi->to(c.autocast_dtype);
        }
        c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
        if (kind == kCompiled) {
          out = ConvFunction::apply(xi, wi, bi, route);
        } else {
          out = gemm_forward(kind, xi, wi, bi);
        }
      }
    }
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(out)));
  }

  int64_t calls(int64_t slot) const {
    TORCH_CHECK(slot >= 0 && slot < static_cast<int64_t>(entries_.size()), "algosel: no such slot: ", slot);
    return entries_[slot].calls;
  }

  void reset_calls() {
    for (Entry& e : entries_) e.calls = 0;
  }

  int64_t size() const { return static_cast<int64_t>(entries_.size()); }

 private:
  // Mutated and read only with the GIL held (Python's calls), so no lock of its own.
  std::unordered_map<Key, int64_t, KeyHash> slots_;
  std::vector<Entry> entries_;
};

// -------------------------------------------------------------------------------- F.conv2d, switched on
// While the hook is on, F.conv2d is `dispatch_conv2d` itself: a call the current table holds costs no Python at
// all; any other goes to the Python hook (`set_fallback`), which plans it. The current table mirrors the Python
// side's switches: a thread's own (`enabled()`; none while it plans) over the process's (`enable()`).
struct ThreadTable {
  bool set = false;  // false: the process's table applies
  RouteTable* table = nullptr;
};
thread_local ThreadTable t_table;
RouteTable* g_table = nullptr;  // tables live as long as the process (the Python side keeps them all)
py::object* g_fallback = nullptr;

RouteTable* table_of(const py::object& table) { return table.is_none() ? nullptr : table.cast<RouteTable*>(); }

void set_thread_table(const py::object& table, bool set) {
  t_table.set = set;
  t_table.table = set ? table_of(table) : nullptr;
}

void set_global_table(const py::object& table) { g_table = table_of(table); }

void set_fallback(const py::object& fn) {
  if (g_fallback == nullptr) g_fallback = new py::object();  // never freed: may be called until exit
  *g_fallback = fn;
}

py::object dispatch_conv2d(py::handle input, py::handle weight, py::handle bias, py::handle stride,
                           py::handle padding, py::handle dilation, py::handle groups) {
  RouteTable* table = t_table.set ? t_table.table : g_table;
  if (table != nullptr) {
    py::object out = table->run(input, weight, bias, stride, padding, dilation, groups);
    if (!out.is_none()) return out;
  }
  TORCH_CHECK(g_fallback != nullptr && *g_fallback, "algosel: the hook's Python path is not set");
  return (*g_fallback)(input, weight, bias, stride, padding, dilation, groups);
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
  py::class_<RouteTable>(m, "RouteTable", "call signatures and their routes: the steady-state dispatch")
      .def(py::init<>())
      .def("add", &RouteTable::add, "hold a call's signature with its route (kind 0 native, 1 compiled, 2 GEMM fc, 3 GEMM 1x1 NHWC)",
           py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
           py::arg("dilation"), py::arg("groups"), py::arg("kind"), py::arg("route") = -1)
      .def("run", &RouteTable::run, "run a call by its route; None where the signature is not held",
           py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
           py::arg("dilation"), py::arg("groups"))
      .def("calls", &RouteTable::calls, py::arg("slot"))
      .def("reset_calls", &RouteTable::reset_calls)
      .def("__len__", &RouteTable::size);
  m.def("plan_count", &plan_count);
  m.def("conv2d", &dispatch_conv2d, "torch.nn.functional.conv2d through the current table, else the Python hook",
        py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1);
  m.def("set_thread_table", &set_thread_table, "this thread's table (set=False: the process's applies)",
        py::arg("table"), py::arg("set"));
  m.def("set_global_table", &set_global_table, "the process's table (None: every call to the Python hook)",
        py::arg("table"));
  m.def("set_fallback", &set_fallback, "the Python hook, for the calls the current table does not hold",
        py::arg("fn"));
}
