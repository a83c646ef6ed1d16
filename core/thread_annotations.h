// Clang thread-safety annotations (-Wthread-safety). They expand to nothing on other compilers.
// Use hypic::Mutex / MutexLock so that the analysis sees lock and unlock.
#pragma once

#include <mutex>

#if defined(__clang__)
#define HYPIC_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HYPIC_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) HYPIC_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY HYPIC_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) HYPIC_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) HYPIC_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) HYPIC_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) HYPIC_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) HYPIC_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) HYPIC_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS HYPIC_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace hypic {

// A std::mutex that the thread-safety analysis understands.
class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // For std::condition_variable_any and std::unique_lock.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace hypic
