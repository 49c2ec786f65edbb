// The records the memory plan lays out by count (per slot, per queued request), each planned at
// its size on a 64-bit target, in a header that includes nothing so that llm/plan.h (a header
// firmware compiles alone) can lay them out.
//
// Why not sizeof in the plan: a plan must come out the same on every target. `keel convert
// --header` works it out on a 64-bit host, and a 32-bit firmware build asserts its own constexpr
// plan equal to it (ports/cortex-m33/main.cpp). A record holds pointers, so its sizeof is largest
// on 64-bit targets (x86-64, aarch64: LP64). Each owner checks its record with record_planned():
// every 64-bit build measures these numbers exactly, so none is picked and none drifts from the
// record it sizes.
#pragma once

#include <cstdint>

namespace keel {

constexpr uint64_t kSlotRecordBytes = 768;     // Runtime::Slot (llm/runtime.h): one per slot
constexpr uint64_t kRequestRecordBytes = 144;  // Scheduler::Record (llm/scheduler.cpp): per slot and queue place
constexpr uint64_t kSlotWorkBytes = 24;        // SlotWork (llm/runtime.h): one per slot, a step's entries
constexpr uint64_t kForwardSegmentBytes = 48;  // ForwardSegment (llm/transformer.h): one per slot of a pass

// The scheduler's region (plan region `requests`): a record per slot and per queue place, then a
// step entry per slot.
constexpr uint64_t requests_region_bytes(uint64_t slots, uint64_t queue_capacity) {
  return (slots + queue_capacity) * kRequestRecordBytes + slots * kSlotWorkBytes;
}

// For static_assert(record_planned<sizeof(T), kTBytes>()): true when a record of `actual` bytes
// here is planned as `planned`, equal on a 64-bit target and at most that on a 32-bit one. A
// mismatch fails inside this template, whose instantiation the compiler prints with both numbers.
template <uint64_t actual, uint64_t planned>
constexpr bool record_planned() {
  static_assert(sizeof(void*) == 8 ? actual == planned : actual <= planned,
                "a record's planned bytes (llm/record_sizes.h) must equal its sizeof on 64-bit targets");
  return true;
}

}  // namespace keel
