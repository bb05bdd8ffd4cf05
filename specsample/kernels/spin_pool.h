// Threads that run the parts of one product beside the calling thread, and wait for the
// next product spinning: a decoding step makes a few hundred products a few microseconds
// apart, and waking a sleeping thread for each (XLA's intra-op pool, whose idle threads
// also spin and compete for the cores) cost more than the smaller products themselves.
// After kSpinMicroseconds without work the threads sleep until the next product.
//
// One product at a time uses the threads: a product started while another runs (XLA may
// run independent custom calls at once) runs all its parts on its own thread. Parts are
// claimed from a counter, so the calling thread never waits on a part no thread has
// started, and the result never depends on which thread ran which part.
#ifndef SPECSAMPLE_KERNELS_SPIN_POOL_H_
#define SPECSAMPLE_KERNELS_SPIN_POOL_H_

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace specsample {

class SpinPool {
 public:
  static constexpr int64_t kSpinMicroseconds = 300;

  // The pool with `threads` threads in all, the caller's included (made once, by the first
  // call; later calls get that pool). Never destroyed: its threads outlive every call.
  static SpinPool& Get(int threads) {
    static SpinPool* pool = new SpinPool(threads);
    return *pool;
  }

  int threads() const { return workers_ + 1; }

  // Runs part(0) .. part(parts - 1) on this thread and the pool's.
  template <typename Part>
  void Run(int64_t parts, const Part& part) {
    Job job;
    job.parts = parts;
    job.context = &part;
    job.call = [](const void* context, int64_t p) { (*static_cast<const Part*>(context))(p); };
    Job* expected = nullptr;
    const bool shared = workers_ > 0 && parts > 1 &&
                        current_.compare_exchange_strong(expected, &job, std::memory_order_acq_rel);
    if (shared) {
      generation_.fetch_add(1, std::memory_order_acq_rel);
      if (sleeping_.load(std::memory_order_acquire) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        wake_.notify_all();
      }
    }
    job.Work();
    if (shared) {
      for (int spins = 0; job.done.load(std::memory_order_acquire) < parts; ++spins) {
        if (spins < 4096) {
          _mm_pause();
        } else {
          std::this_thread::yield();
        }
      }
      current_.store(nullptr, std::memory_order_seq_cst);
      // A thread that read `current_` before the store may still hold &job.
      while (busy_.load(std::memory_order_seq_cst) > 0) _mm_pause();
    }
  }

 private:
  struct Job {
    int64_t parts = 0;
    const void* context = nullptr;
    void (*call)(const void*, int64_t) = nullptr;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    void Work() {
      for (int64_t p; (p = next.fetch_add(1, std::memory_order_relaxed)) < parts;) {
        call(context, p);
        done.fetch_add(1, std::memory_order_release);
      }
    }
  };

  explicit SpinPool(int threads) : workers_(threads > 1 ? threads - 1 : 0) {
    for (int t = 0; t < workers_; ++t) std::thread([this] { Loop(); }).detach();
  }

  void Loop() {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      auto start = std::chrono::steady_clock::now();
      for (int spins = 0; generation_.load(std::memory_order_acquire) == seen; ++spins) {
        // Pauses, then yields: a thread XLA wakes for its own work gets the core at once.
        if (spins < 1024) {
          _mm_pause();
        } else {
          std::this_thread::yield();
        }
        if (spins % 256 == 255 &&
            std::chrono::steady_clock::now() - start > std::chrono::microseconds(kSpinMicroseconds)) {
          std::unique_lock<std::mutex> lock(mutex_);
          sleeping_.fetch_add(1, std::memory_order_acq_rel);
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
          sleeping_.fetch_sub(1, std::memory_order_acq_rel);
        }
      }
      seen = generation_.load(std::memory_order_acquire);
      busy_.fetch_add(1, std::memory_order_seq_cst);
      if (Job* job = current_.load(std::memory_order_seq_cst)) job->Work();
      busy_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  const int workers_;
  std::atomic<Job*> current_{nullptr};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> busy_{0};
  std::atomic<int> sleeping_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace specsample

#endif  // SPECSAMPLE_KERNELS_SPIN_POOL_H_
