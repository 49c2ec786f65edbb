// The safetensors weights of a Hugging Face model directory: one model.safetensors, an index
// (model.safetensors.index.json) with its shards, or every *.safetensors in the directory.
//
// Safetensors: u64 little-endian header length N, N bytes of JSON
//   {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data; offsets are relative to the first byte after the header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "convert/source_file.h"
#include "convert/source_model.h"

namespace keel::convert::hf {

// One tensor of a safetensors file as its header describes it, checked against the file.
struct StTensor {
  std::string name;
  SrcType type = SrcType::F32;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // absolute, in `file`
  uint64_t n_bytes = 0;
  std::shared_ptr<OpenFile> file;
};

// Every tensor of the directory's weights, appended to `tensors` in file order; `what` says
// which layout was found (for the source description). False with `error` naming the file and
// tensor when a header is malformed, a tensor is in two files or the index places one in a file
// that does not hold it.
bool read_weights(const std::string& dir, std::vector<StTensor>& tensors, std::string& what, std::string& error);

}  // namespace keel::convert::hf
