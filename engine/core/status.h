// Status codes grouped by kind and a fixed-size message buffer so that
// an error can say what was expected and what was found without allocating.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel {

enum class StatusKind : uint8_t { Ok, BadArgument, BadModel, OutOfMemory, Unsupported, Internal };

enum class Status : uint16_t {
  Ok = 0,
  // Bad argument (caller's input)
  InvalidArgument = 100,
  PromptTooLong,
  BudgetTooSmall,
  InvalidUtf8,
  // Bad model (file contents)
  ModelTruncated = 200,
  ModelBadIdentifier,
  ModelVerifyFailed,  // FlatBuffers structural verification
  ModelBadVersion,
  ModelMissingField,
  ModelBadOffset,  // tensor bytes outside the data section
  ModelMisaligned,
  ModelShapeMismatch,  // shape inconsistent with hyper-parameters
  ModelBadHyper,       // absurd or inconsistent hyper-parameters
  ModelBadDType,
  ModelBadTokenizer,
  ModelMissingTensor,
  ModelDuplicateTensor,
  ModelBadSize,           // tensor byte size inconsistent with dtype and shape
  ModelChecksumMismatch,  // a part of the file differs from what the converter wrote
  ModelNoChecksums,       // asked to verify a file written before tensors carried checksums
  // Out of memory in an arena
  ArenaTooSmall = 300,
  KvFull,
  QueueFull,  // every slot busy and the request queue at its planned capacity
  // Unsupported
  UnsupportedDType = 400,
  UnsupportedArch,
  UnsupportedBackend,
  // Internal
  Internal = 500,
};

StatusKind status_kind(Status s);
const char* to_string(Status s);

// A status plus a human-readable message held inline (no allocation).
class Error {
 public:
  static constexpr size_t kMessageCapacity = 256;
  Error() = default;
  Error(Status s, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
  Status status() const { return status_; }
  const char* message() const { return message_; }
  bool ok() const { return status_ == Status::Ok; }

 private:
  Status status_ = Status::Ok;
  char message_[kMessageCapacity] = {};
};

}  // namespace keel
