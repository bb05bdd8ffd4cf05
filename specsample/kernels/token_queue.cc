// Streaming's queue: a compiled decoding loop pushes each iteration's kept tokens here and
// a host thread of specsample.kernels.token_queue pops them, so that streaming costs the
// loop a copy of a few integers per iteration, not a host callback (which runs Python
// inside the loop and takes JAX's slow path for programs with callbacks).
//
// The XLA FFI handler "specsample_stream_tokens" (a custom call with a side effect, no
// results) takes packed s32[n]: the stream id, then what the iteration hands the host.
// Items of an id nobody opened are dropped (a streaming program run for timing); an id
// stopped by its reader (its sink failed, or nobody reads it any more) makes the call
// return an error, which ends the program at that iteration.
//
// The C functions below (called through ctypes, which releases the GIL) open, stop,
// finish and close a stream and pop its items in order. A stream is finished by its reader
// once the program has ended: every item it pushed is in the queue by then, and a pop
// answers kFinished when the queue is empty.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace specsample {
namespace {

struct Stream {
  std::deque<std::vector<int32_t>> items;  // in the order the program pushed them
  bool stopped = false;                    // pushes fail: the program ends
  bool finished = false;                   // the program ended: no more pushes
};

struct Streams {
  std::mutex mutex;
  std::condition_variable changed;  // an item pushed, a stream finished or closed
  std::unordered_map<int32_t, Stream> by_id;
};

Streams& AllStreams() {
  static Streams* streams = new Streams();  // never destroyed: no teardown order to race
  return *streams;
}

// What SpecsampleStreamPop answers besides an item's length.
constexpr int64_t kTimedOut = -1;
constexpr int64_t kNoStream = -2;
constexpr int64_t kFinished = -3;

ffi::Error PushTokens(ffi::Buffer<ffi::S32> packed) {
  const int32_t* data = packed.typed_data();
  const size_t size = packed.element_count();
  if (size == 0) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "specsample_stream_tokens: no stream id");
  }
  Streams& streams = AllStreams();
  {
    std::lock_guard<std::mutex> lock(streams.mutex);
    auto found = streams.by_id.find(data[0]);
    if (found == streams.by_id.end()) return ffi::Error::Success();  // nobody reads: dropped
    if (found->second.stopped) {
      return ffi::Error(ffi::ErrorCode::kCancelled,
                        "specsample: the stream's reader stopped the decode");
    }
    found->second.items.emplace_back(data + 1, data + size);
  }
  streams.changed.notify_all();
  return ffi::Error::Success();
}

}  // namespace
}  // namespace specsample

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleStreamTokens, specsample::PushTokens,
                              ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::S32>>());

extern "C" {

// Opens stream `id` (empty); 0 on success, -1 when it is open already.
int SpecsampleStreamOpen(int32_t id) {
  specsample::Streams& streams = specsample::AllStreams();
  std::lock_guard<std::mutex> lock(streams.mutex);
  return streams.by_id.try_emplace(id).second ? 0 : -1;
}

// Makes the program's next push fail and drops what is queued.
void SpecsampleStreamStop(int32_t id) {
  specsample::Streams& streams = specsample::AllStreams();
  std::lock_guard<std::mutex> lock(streams.mutex);
  auto found = streams.by_id.find(id);
  if (found == streams.by_id.end()) return;
  found->second.stopped = true;
  found->second.items.clear();
}

// Says the program has ended: a pop on the empty queue answers kFinished.
void SpecsampleStreamFinish(int32_t id) {
  specsample::Streams& streams = specsample::AllStreams();
  {
    std::lock_guard<std::mutex> lock(streams.mutex);
    auto found = streams.by_id.find(id);
    if (found != streams.by_id.end()) found->second.finished = true;
  }
  streams.changed.notify_all();
}

// Forgets stream `id` and what it still holds; later pushes of the id are dropped.
void SpecsampleStreamClose(int32_t id) {
  specsample::Streams& streams = specsample::AllStreams();
  {
    std::lock_guard<std::mutex> lock(streams.mutex);
    streams.by_id.erase(id);
  }
  streams.changed.notify_all();
}

// Waits up to timeout_ms for the first item of stream `id`. Returns its length, and when
// it fits in `capacity` int32s copies it to `out` and removes it (otherwise leaves it:
// call again with room for it); kTimedOut, kNoStream, or kFinished (ended and empty).
int64_t SpecsampleStreamPop(int32_t id, int32_t* out, int64_t capacity, int32_t timeout_ms) {
  specsample::Streams& streams = specsample::AllStreams();
  std::unique_lock<std::mutex> lock(streams.mutex);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool waited_enough = false;
  while (true) {
    auto found = streams.by_id.find(id);
    if (found == streams.by_id.end()) return specsample::kNoStream;
    specsample::Stream& stream = found->second;
    if (!stream.items.empty()) {
      std::vector<int32_t>& item = stream.items.front();
      const int64_t length = static_cast<int64_t>(item.size());
      if (length <= capacity) {
        std::memcpy(out, item.data(), item.size() * sizeof(int32_t));
        stream.items.pop_front();
      }
      return length;
    }
    if (stream.finished) return specsample::kFinished;
    if (waited_enough) return specsample::kTimedOut;
    waited_enough = streams.changed.wait_until(lock, deadline) == std::cv_status::timeout;
  }
}

}  // extern "C"
