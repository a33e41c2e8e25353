// See plan.h. A plan is loaded through cuDNN's backend API from the JSON representation that the frontend's
// serialized blob carries (its UBJSON field "cudnn_backend_data"), and executed with a variant pack built per call:
// only cudnn.h and the JSON reader the frontend bundles are used here. (The frontend's own C++ plan loading was
// tried first and crashed inside ExecutionPlan_v8::buildTag when built beside torch on the H200, 2026-12-01.)

#include "plan.h"

#include <cudnn.h>

#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>

#include <memory>
#include <mutex>
#include <vector>

namespace algosel {

struct CudnnPlan {
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t uids[3] = {0, 0, 0};  // of x, w, y: the variant pack's order here is always (x, w, y)
  int64_t workspace_bytes = 0;
  int device = 0;
};

namespace {

std::mutex g_mutex;  // the handles (the autograd engine runs backward on a thread of its own)
std::vector<cudnnHandle_t> g_handles;
std::vector<void*> g_streams;

std::string status_text(const char* what, cudnnStatus_t status) {
  return std::string(what) + ": " + cudnnGetErrorString(status);
}

// The device's handle bound to `stream` (rebound only when the stream changed). Call under g_mutex, with `device`
// current.
cudnnHandle_t handle_for(int device, void* stream, bool bind, std::string* error) {
  if (device >= static_cast<int>(g_handles.size())) {
    g_handles.resize(device + 1, nullptr);
    g_streams.resize(device + 1, reinterpret_cast<void*>(-1));
  }
  if (g_handles[device] == nullptr) {
    cudnnHandle_t h = nullptr;
    auto status = cudnnCreate(&h);
    if (status != CUDNN_STATUS_SUCCESS) {
      *error = status_text("cudnnCreate", status);
      return nullptr;
    }
    g_handles[device] = h;
  }
  if (bind && stream != g_streams[device]) {
    auto status = cudnnSetStream(g_handles[device], static_cast<cudaStream_t>(stream));
    if (status != CUDNN_STATUS_SUCCESS) {
      *error = status_text("cudnnSetStream", status);
      return nullptr;
    }
    g_streams[device] = stream;
  }
  return g_handles[device];
}

}  // namespace

CudnnPlan* plan_load(const uint8_t* data, size_t size, int64_t uid_x, int64_t uid_w, int64_t uid_y, int device,
                     std::string* error) {
  std::string plan_json;
  try {
    auto j = nlohmann::json::from_ubjson(data, data + size);
    if (!j.contains("cudnn_backend_data")) {
      *error = "the serialized plan has no cudnn_backend_data (not a backend plan of the cuDNN frontend)";
      return nullptr;
    }
    plan_json = j["cudnn_backend_data"].get<std::string>();
  } catch (const std::exception& exc) {
    *error = std::string("reading the serialized plan: ") + exc.what();
    return nullptr;
  }
  auto plan = std::make_unique<CudnnPlan>();
  plan->uids[0] = uid_x;
  plan->uids[1] = uid_w;
  plan->uids[2] = uid_y;
  plan->device = device;
  std::lock_guard<std::mutex> lock(g_mutex);
  cudnnHandle_t h = handle_for(device, nullptr, /*bind=*/false, error);
  if (h == nullptr) return nullptr;
  auto status = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan->plan);
  if (status != CUDNN_STATUS_SUCCESS) {
    *error = status_text("creating an execution plan", status);
    return nullptr;
  }
  std::vector<char> chars(plan_json.begin(), plan_json.end());
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  // The handle attribute is deprecated in cuDNN 9 but is how a plan is loaded from JSON (the frontend does so).
  status = cudnnBackendSetAttribute(plan->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
#pragma GCC diagnostic pop
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnBackendSetAttribute(plan->plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                      static_cast<int64_t>(chars.size()), chars.data());
  }
  if (status == CUDNN_STATUS_SUCCESS) status = cudnnBackendFinalize(plan->plan);
  int64_t count = 0;
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnBackendGetAttribute(plan->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                      &count, &plan->workspace_bytes);
  }
  if (status != CUDNN_STATUS_SUCCESS) {
    *error = status_text("loading a cuDNN execution plan from its JSON", status);
    cudnnBackendDestroyDescriptor(plan->plan);
    return nullptr;
  }
  return plan.release();
}

int64_t plan_workspace_bytes(const CudnnPlan* plan) { return plan->workspace_bytes; }

bool plan_execute(const CudnnPlan* plan, void* x, void* w, void* y, void* workspace, void* stream,
                  std::string* error) {
  void* ptrs[3] = {x, w, y};
  cudnnBackendDescriptor_t pack = nullptr;
  auto status = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  }
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3,
                                      const_cast<int64_t*>(plan->uids));
  }
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  }
  if (status == CUDNN_STATUS_SUCCESS) status = cudnnBackendFinalize(pack);
  if (status == CUDNN_STATUS_SUCCESS) {
    std::lock_guard<std::mutex> lock(g_mutex);
    cudnnHandle_t h = handle_for(plan->device, stream, /*bind=*/true, error);
    if (h == nullptr) {
      cudnnBackendDestroyDescriptor(pack);
      return false;
    }
    status = cudnnBackendExecute(h, plan->plan, pack);
  }
  if (pack != nullptr) cudnnBackendDestroyDescriptor(pack);
  if (status != CUDNN_STATUS_SUCCESS) {
    *error = status_text("executing a cuDNN plan", status);
    return false;
  }
  return true;
}

}  // namespace algosel
