#include "core/status.h"

#include <cstdarg>

#include "core/format.h"

namespace keel {

StatusKind status_kind(Status s) {
  const unsigned v = static_cast<unsigned>(s);
  if (v == 0) return StatusKind::Ok;
  if (v < 200) return StatusKind::BadArgument;
  if (v < 300) return StatusKind::BadModel;
  if (v < 400) return StatusKind::OutOfMemory;
  if (v < 500) return StatusKind::Unsupported;
  return StatusKind::Internal;
}

const char* to_string(Status s) {
  switch (s) {
    case Status::Ok: return "ok";
    case Status::InvalidArgument: return "invalid argument";
    case Status::PromptTooLong: return "prompt too long";
    case Status::BudgetTooSmall: return "budget too small";
    case Status::InvalidUtf8: return "invalid UTF-8";
    case Status::ModelTruncated: return "model truncated";
    case Status::ModelBadIdentifier: return "not a .keel file";
    case Status::ModelVerifyFailed: return "model metadata failed verification";
    case Status::ModelBadVersion: return "unsupported format version";
    case Status::ModelMissingField: return "model field missing";
    case Status::ModelBadOffset: return "tensor outside data section";
    case Status::ModelMisaligned: return "tensor misaligned";
    case Status::ModelShapeMismatch: return "tensor shape mismatch";
    case Status::ModelBadHyper: return "bad hyper-parameters";
    case Status::ModelBadDType: return "bad tensor dtype";
    case Status::ModelBadTokenizer: return "bad tokenizer";
    case Status::ModelMissingTensor: return "tensor missing";
    case Status::ModelDuplicateTensor: return "tensor duplicated";
    case Status::ModelBadSize: return "tensor size mismatch";
    case Status::ModelChecksumMismatch: return "checksum mismatch";
    case Status::ModelNoChecksums: return "model has no checksums";
    case Status::ArenaTooSmall: return "arena too small";
    case Status::KvFull: return "KV cache full";
    case Status::QueueFull: return "request queue full";
    case Status::UnsupportedDType: return "unsupported dtype";
    case Status::UnsupportedArch: return "unsupported architecture";
    case Status::UnsupportedBackend: return "unsupported backend";
    case Status::Internal: return "internal error";
  }
  return "unknown status";
}

Error::Error(Status s, const char* fmt, ...) : status_(s) {
  va_list ap;
  va_start(ap, fmt);
  vformat(message_, kMessageCapacity, fmt, ap);
  va_end(ap);
}

}  // namespace keel
