#include "llm/scheduler.h"

#include <cinttypes>
#include <new>

#include "core/check.h"
#include "llm/record_sizes.h"

namespace keel {

// A request in a slot or in the queue; id 0 marks an empty record.
// Its sequence's phase is Free while it waits in the queue.
struct Scheduler::Record {
  uint64_t id = 0;
  Sequence seq;
  text::SamplerConfig sampling;
  bool cancelled = false;  // cancel() was called; the next step finishes it
  // Order of the prompt's last turn: set on entering a slot and after each chunk it runs, so
  // prefill goes to the slot served least recently and prompts take chunks in rotation.
  uint64_t prefill_turn = 0;
  uint64_t group = 0;
};

Error Scheduler::init(Runtime& runtime) {
  static_assert(record_planned<sizeof(Record), kRequestRecordBytes>());
  KEEL_ENSURE(runtime.initialized(), Status::InvalidArgument, "the runtime is not initialized");
  const PlanConfig& pc = runtime.config().plan;
  const Span<uint8_t> block = runtime.request_records();
  const uint64_t records = uint64_t(pc.slots) + pc.queue_capacity;
  KEEL_ENSURE(block.size() >= requests_region_bytes(pc.slots, pc.queue_capacity), Status::Internal,
              "the plan's requests region holds %zu bytes; %" PRIu32 " slots and a queue of %" PRIu32 " need more",
              block.size(), pc.slots, pc.queue_capacity);
  rt_ = &runtime;
  slots_ = pc.slots;
  queue_capacity_ = pc.queue_capacity;
  records_ = block.data();
  for (uint64_t i = 0; i < records; ++i) new (records_ + i * kRequestRecordBytes) Record();
  work_ = reinterpret_cast<SlotWork*>(records_ + records * kRequestRecordBytes);
  for (uint32_t i = 0; i < slots_; ++i) new (work_ + i) SlotWork();
  queue_head_ = queue_count_ = 0;
  next_id_ = next_prefill_turn_ = 1;
  last_prefilling_ = 0;
  last_prompt_tokens_ = 0;
  for (uint32_t i = 0; i < slots_; ++i) KEEL_TRY(rt_->reset(i));
  return Error();
}

Scheduler::Record& Scheduler::slot_record(uint32_t slot) const {
  return *reinterpret_cast<Record*>(records_ + uint64_t(slot) * kRequestRecordBytes);
}

Scheduler::Record& Scheduler::queue_record(uint32_t i) const {
  const uint32_t at = (queue_head_ + i) % (queue_capacity_ ? queue_capacity_ : 1);
  return *reinterpret_cast<Record*>(records_ + (uint64_t(slots_) + at) * kRequestRecordBytes);
}

void Scheduler::remove_queued(uint32_t i) {
  if (i == 0) {
    queue_record(0) = Record();
    queue_head_ = (queue_head_ + 1) % queue_capacity_;
  } else {
    for (uint32_t j = i; j + 1 < queue_count_; ++j) queue_record(j) = queue_record(j + 1);
    queue_record(queue_count_ - 1) = Record();
  }
  --queue_count_;
}

uint32_t Scheduler::group_slots(uint64_t group) const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < slots_; ++i) {
    const Record& r = slot_record(i);
    n += r.seq.phase != SlotPhase::Free && r.group == group ? 1 : 0;
  }
  return n;
}

bool Scheduler::over_share(uint64_t group) const {
  return max_per_group_ > 0 && group != 0 && group_slots(group) >= max_per_group_;
}

uint32_t Scheduler::active() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < slots_; ++i) n += slot_record(i).seq.phase != SlotPhase::Free ? 1 : 0;
  return n;
}

Result<uint64_t> Scheduler::submit(const SchedulerRequest& q) {
  KEEL_ENSURE(rt_ != nullptr, Status::InvalidArgument, "the scheduler is not initialized");
  KEEL_ENSURE(!q.prompt.empty(), Status::InvalidArgument, "request with an empty prompt");
  KEEL_ENSURE(q.max_new_tokens >= 1, Status::InvalidArgument, "max_new_tokens 0; expected at least 1");
  KEEL_ENSURE(q.n_stop_tokens <= kMaxStopTokens, Status::InvalidArgument, "%" PRIu32 " stop tokens; at most %" PRIu32,
              q.n_stop_tokens, kMaxStopTokens);
  KEEL_TRY(rt_->model().check_tokens(q.prompt));
  KEEL_TRY(text::Sampler::check(q.sampling));
  Record* r = nullptr;
  // Straight into a free slot only when nobody waits: the queue is first come, first served.
  if (queue_count_ == 0 && !over_share(q.group)) {
    for (uint32_t i = 0; i < slots_ && !r; ++i) {
      if (slot_record(i).seq.phase == SlotPhase::Free) r = &slot_record(i);
    }
  }
  const bool in_slot = r != nullptr;
  if (!in_slot) {
    KEEL_ENSURE(queue_count_ < queue_capacity_, Status::QueueFull,
                "all %" PRIu32 " slots are busy and the queue holds its %" PRIu32 " requests", slots_, queue_capacity_);
    r = &queue_record(queue_count_++);
  }
  *r = Record();
  r->id = next_id_++;
  r->seq.start(q.prompt, q.max_new_tokens, q.default_stops, Span<const int32_t>(q.stop_tokens, q.n_stop_tokens));
  r->seq.phase = in_slot ? SlotPhase::Prefilling : SlotPhase::Free;  // Free: waiting in the queue
  r->sampling = q.sampling;
  r->group = q.group;
  if (in_slot) r->prefill_turn = next_prefill_turn_++;
  return r->id;
}

Error Scheduler::cancel(uint64_t id) {
  KEEL_ENSURE(rt_ != nullptr, Status::InvalidArgument, "the scheduler is not initialized");
  for (uint32_t i = 0; id != 0 && i < slots_; ++i) {
    Record& r = slot_record(i);
    if (r.seq.phase != SlotPhase::Free && r.id == id) {
      r.cancelled = true;
      return Error();
    }
  }
  for (uint32_t i = 0; id != 0 && i < queue_count_; ++i) {
    if (queue_record(i).id == id) {
      queue_record(i).cancelled = true;
      return Error();
    }
  }
  return Error(Status::InvalidArgument, "request %" PRIu64 " is neither queued nor running", id);
}

Error Scheduler::withdraw(uint64_t id) {
  KEEL_ENSURE(rt_ != nullptr, Status::InvalidArgument, "the scheduler is not initialized");
  for (uint32_t i = 0; id != 0 && i < queue_count_; ++i) {
    if (queue_record(i).id == id) {
      remove_queued(i);
      return Error();
    }
  }
  return Error(Status::InvalidArgument, "request %" PRIu64 " is not queued", id);
}

SlotState Scheduler::slot_state(uint32_t slot) const {
  SlotState st;
  if (!rt_ || slot >= slots_) return st;
  const Record& r = slot_record(slot);
  st.phase = r.seq.phase;
  st.kv_budget = rt_->config().plan.kv_budget_tokens;
  st.kv_tokens = rt_->kv_cache(slot).visible();
  if (r.seq.phase == SlotPhase::Free) return st;
  st.request = r.id;
  st.prompt_tokens = r.seq.prompt_len;
  st.prompt_done = r.seq.prompt_done;
  st.generated = r.seq.generated;
  return st;
}

void Scheduler::finish(Record& r, uint32_t slot, int32_t token, FinishReason why, Span<TokenEvent> events, size_t* n) {
  if (*n < events.size()) events[(*n)++] = TokenEvent{r.id, slot, token, why};
  if (slot != kNoSlot) (void)rt_->reset(slot);
  r = Record();
}

void Scheduler::admit() {
  for (uint32_t i = 0; i < slots_ && queue_count_ > 0; ++i) {
    Record& s = slot_record(i);
    if (s.seq.phase != SlotPhase::Free) continue;
    // The oldest request whose group is under its share.
    uint32_t j = 0;
    while (j < queue_count_ && over_share(queue_record(j).group)) ++j;
    if (j == queue_count_) return;
    s = queue_record(j);
    remove_queued(j);
    s.seq.phase = SlotPhase::Prefilling;
    s.prefill_turn = next_prefill_turn_++;
  }
}

Error Scheduler::step(Span<TokenEvent> events, size_t* n_events) {
  KEEL_ENSURE(rt_ != nullptr && n_events != nullptr, Status::InvalidArgument,
              "the scheduler is not initialized, or no event count");
  KEEL_ENSURE(events.size() >= max_events(), Status::InvalidArgument,
              "room for %zu events; a step may report %zu (slots + queue capacity)", events.size(), max_events());
  size_t n = 0;
  last_prefilling_ = 0;
  last_prompt_tokens_ = 0;
  // Cancelled requests leave first: queued ones (kept in order), then running ones.
  for (uint32_t i = 0, kept = 0, count = queue_count_; i < count; ++i) {
    Record r = queue_record(i);
    if (r.cancelled) {
      finish(r, kNoSlot, -1, FinishReason::Cancelled, events, &n);
      --queue_count_;
    } else {
      if (kept != i) queue_record(kept) = r;
      ++kept;
    }
  }
  for (uint32_t i = queue_count_; i < queue_capacity_; ++i) queue_record(i) = Record();
  for (uint32_t i = 0; i < slots_; ++i) {
    Record& r = slot_record(i);
    if (r.seq.phase != SlotPhase::Free && r.cancelled) finish(r, i, -1, FinishReason::Cancelled, events, &n);
  }
  admit();
  for (uint32_t i = 0; i < slots_; ++i) last_prefilling_ += slot_record(i).seq.phase == SlotPhase::Prefilling ? 1 : 0;

  // Decode rows first: every decoding slot advances by one token each pass.
  const uint32_t chunk = rt_->config().plan.chunk_tokens;
  uint32_t rows_left = uint32_t(plan_step_rows(chunk, slots_)), count = 0;
  for (uint32_t i = 0; i < slots_; ++i) {
    Record& r = slot_record(i);
    if (r.seq.phase != SlotPhase::Decoding) continue;
    SlotWork& w = work_[count];
    (void)r.seq.plan(*rt_, i, rows_left, w);  // a decode entry: nothing to begin, nothing to fail
    ++count;
    --rows_left;
  }
  // Then whole prompt chunks while they fit, the slot served least recently first: two long
  // prompts take turns instead of the younger waiting for the older to finish.
  for (;;) {
    Record* next = nullptr;
    uint32_t next_slot = 0;
    for (uint32_t i = 0; i < slots_; ++i) {
      Record& r = slot_record(i);
      bool queued_in_pass = false;
      for (uint32_t j = 0; j < count; ++j) queued_in_pass = queued_in_pass || work_[j].slot == i;
      if (r.seq.phase != SlotPhase::Prefilling || queued_in_pass) continue;
      if (!next || r.prefill_turn < next->prefill_turn) {
        next = &r;
        next_slot = i;
      }
    }
    if (!next) break;
    Record& r = *next;
    const bool starting = !r.seq.started;
    SlotWork& w = work_[count];
    const Error e = r.seq.plan(*rt_, next_slot, rows_left, w);
    if (!e.ok()) {
      finish(r, next_slot, -1, e.status() == Status::KvFull ? FinishReason::KvFull : FinishReason::Error, events, &n);
      continue;
    }
    if (starting && !rt_->set_sampler(next_slot, r.sampling).ok()) {
      finish(r, next_slot, -1, FinishReason::Error, events, &n);
      continue;
    }
    if (w.n == 0) break;
    r.prefill_turn = next_prefill_turn_++;
    ++count;
    rows_left -= w.n;
  }
  if (count == 0) {
    admit();
    *n_events = n;
    return Error();
  }

  const Error pass = rt_->run(work_, count);
  for (uint32_t j = 0; j < count; ++j) {
    const SlotWork& w = work_[j];
    Record& r = slot_record(w.slot);
    if (w.status != Status::Ok) {
      finish(r, w.slot, -1, w.status == Status::KvFull ? FinishReason::KvFull : FinishReason::Error, events, &n);
      continue;
    }
    if (w.prompt) last_prompt_tokens_ += w.n;
    if (!r.seq.advance(w)) continue;
    const SequenceToken t = r.seq.next(*rt_, w.slot);
    if (t.finish != FinishReason::None) {
      finish(r, w.slot, t.token, t.finish, events, &n);
    } else if (n < events.size()) {
      events[n++] = TokenEvent{r.id, w.slot, t.token, FinishReason::None};
    }
  }
  // Slots freed by this pass take waiting requests now: between steps a free slot means an
  // empty queue, so submit() refuses only when every slot and queue place is taken.
  admit();
  *n_events = n;
  return pass;
}

}  // namespace keel
