// The cuDNN side of algosel's compiled runtime path: plans deserialized from the frontend's blobs, executed on a
// stream. Kept apart from the PyTorch glue (conv_ext.cpp) so that the heavy frontend headers and torch's headers
// compile as two translation units, in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace algosel {

struct CudnnPlan;  // opaque: a deserialized frontend graph with one execution plan

// Deserialize a plan built by the cuDNN frontend's Python API on `device`; uids: of x, w and y in that graph.
// Returns nullptr and sets *error on failure.
CudnnPlan* plan_load(const uint8_t* data, size_t size, int64_t uid_x, int64_t uid_w, int64_t uid_y, int device,
                     std::string* error);

int64_t plan_workspace_bytes(const CudnnPlan* plan);

// Execute on `stream` (a cudaStream_t) with the device pointers of x, w, y (one of them the output) and a
// workspace of plan_workspace_bytes (nullptr when 0). Returns false and sets *error on failure. Thread-safe.
bool plan_execute(const CudnnPlan* plan, void* x, void* w, void* y, void* workspace, void* stream,
                  std::string* error);

}  // namespace algosel
