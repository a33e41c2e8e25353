// See plan.h. Only the cuDNN frontend's header-only C++ API (the same 1.32 code as its Python module) and CUDA's
// runtime headers are included here.

#include "plan.h"

#include <dlfcn.h>

#include <cudnn_frontend.h>

#include <memory>
#include <mutex>
#include <vector>

namespace cudnn_frontend {
// The frontend resolves cuDNN's symbols through this handle (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): it is the
// libcudnn.so.9 torch already loaded, so that plans run on exactly the library PyTorch uses.
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace fe = cudnn_frontend;

namespace algosel {

struct CudnnPlan {
  fe::graph::Graph graph;
  int slot_x = -1, slot_w = -1, slot_y = -1;  // positions of x, w, y among the variant pack's sorted uids
  int n_user = 0;
  int64_t workspace_bytes = 0;
  int device = 0;
};

namespace {

std::mutex g_mutex;  // the handles (the autograd engine runs backward on a thread of its own)
std::vector<cudnnHandle_t> g_handles;
std::vector<void*> g_streams;

bool load_cudnn(std::string* error) {
  if (fe::cudnn_dlhandle != nullptr) return true;
  // By soname: the copy torch loaded is found among the loaded objects (RTLD_NOLOAD), else loaded.
  fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
  if (fe::cudnn_dlhandle == nullptr) fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW);
  if (fe::cudnn_dlhandle == nullptr) {
    const char* why = dlerror();
    *error = std::string("cannot dlopen libcudnn.so.9: ") + (why ? why : "unknown error");
    return false;
  }
  return true;
}

// The device's handle bound to `stream` (rebound only when the stream changed). Call under g_mutex.
cudnnHandle_t handle_for(int device, void* stream, std::string* error) {
  if (device >= static_cast<int>(g_handles.size())) {
    g_handles.resize(device + 1, nullptr);
    g_streams.resize(device + 1, nullptr);
  }
  if (g_handles[device] == nullptr) {
    if (!load_cudnn(error)) return nullptr;
    cudnnHandle_t h = nullptr;
    auto status = fe::detail::create_handle(&h);
    if (status != CUDNN_STATUS_SUCCESS) {
      *error = std::string("cudnnCreate: ") + fe::detail::get_error_string(status);
      return nullptr;
    }
    g_handles[device] = h;
    g_streams[device] = reinterpret_cast<void*>(-1);  // no stream bound yet
  }
  if (stream != g_streams[device]) {
    auto status = fe::detail::set_stream(g_handles[device], static_cast<cudaStream_t>(stream));
    if (status != CUDNN_STATUS_SUCCESS) {
      *error = std::string("cudnnSetStream: ") + fe::detail::get_error_string(status);
      return nullptr;
    }
    g_streams[device] = stream;
  }
  return g_handles[device];
}

int slot_of(const std::vector<int64_t>& sorted_uids, int64_t uid) {
  for (size_t i = 0; i < sorted_uids.size(); ++i) {
    if (sorted_uids[i] == uid) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

CudnnPlan* plan_load(const uint8_t* data, size_t size, int64_t uid_x, int64_t uid_w, int64_t uid_y, int device,
                     std::string* error) {
  auto plan = std::make_unique<CudnnPlan>();
  plan->device = device;
  std::vector<uint8_t> blob(data, data + size);
  std::lock_guard<std::mutex> lock(g_mutex);
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  // The handle is only used to finalize the plan here; the stream it is bound to does not matter.
  cudnnHandle_t h = handle_for(device, device < static_cast<int>(g_streams.size()) ? g_streams[device] : nullptr,
                               error);
  bool ok = h != nullptr;
  if (ok) {
    // No warm-up: it captures a throw-away CUDA graph, and the hook may be planning inside a capture.
    auto err = plan->graph.deserialize(h, blob, /*enforce_precompiled=*/false, /*run_warmup=*/false);
    if (!err.is_good()) {
      *error = "deserializing a cuDNN plan: " + err.get_message();
      ok = false;
    }
  }
  if (ok) {
    auto uids = plan->graph.get_variant_pack_uids_sorted();
    plan->n_user = static_cast<int>(uids.size());
    plan->slot_x = slot_of(uids, uid_x);
    plan->slot_w = slot_of(uids, uid_w);
    plan->slot_y = slot_of(uids, uid_y);
    if (plan->n_user != 3 || plan->slot_x < 0 || plan->slot_w < 0 || plan->slot_y < 0) {
      *error = "a convolution plan must have exactly the x, w and y tensors (got " + std::to_string(plan->n_user) +
               " user tensors)";
      ok = false;
    }
  }
  if (ok) {
    auto err = plan->graph.get_workspace_size(plan->workspace_bytes);
    if (!err.is_good()) {
      *error = "workspace size of a cuDNN plan: " + err.get_message();
      ok = false;
    }
  }
  cudaSetDevice(previous);
  return ok ? plan.release() : nullptr;
}

int64_t plan_workspace_bytes(const CudnnPlan* plan) { return plan->workspace_bytes; }

bool plan_execute(const CudnnPlan* plan, void* x, void* w, void* y, void* workspace, void* stream,
                  std::string* error) {
  void* ptrs[3];
  ptrs[plan->slot_x] = x;
  ptrs[plan->slot_w] = w;
  ptrs[plan->slot_y] = y;
  std::lock_guard<std::mutex> lock(g_mutex);
  cudnnHandle_t h = handle_for(plan->device, stream, error);
  if (h == nullptr) return false;
  auto err = plan->graph.execute(h, ptrs, plan->n_user, workspace);
  if (!err.is_good()) {
    *error = "executing a cuDNN plan: " + err.get_message();
    return false;
  }
  return true;
}

}  // namespace algosel
