// The tensors of a Hugging Face checkpoint under the converter's names and roles: llama's
// ("model.layers.N.self_attn.q_proj.weight" -> "blk.N.attn_q.weight"), Gemma 3's extra norms,
// and a multimodal gemma3 checkpoint's text model (its vision tower is not read).
#pragma once

#include <string>
#include <vector>

#include "convert/hf_safetensors.h"
#include "convert/source_model.h"

namespace keel::convert::hf {

// m.tensors from the safetensors tensors `st`, in canonical order (embedding, blocks in forward
// order, final norm, classifier), each checked against the shape m.hyper implies; every
// required tensor must be present. Keeps the files open in m.keep_alive. False with `error`
// naming the Hugging Face tensor on an unknown name, a wrong shape, a duplicate or a missing
// tensor.
bool build_tensors(std::vector<StTensor>& st, SourceModel& m, std::string& error);

}  // namespace keel::convert::hf
