#include "server/compute_queue.h"

#include <utility>

namespace hypic::server {

ComputeQueue::ComputeQueue(uint32_t workers, uint32_t capacity, DepthObserver observer)
    : capacity_(capacity), observer_(std::move(observer)) {
  workers_.reserve(workers);
  for (uint32_t i = 0; i < workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ComputeQueue::~ComputeQueue() { Stop(); }

Status ComputeQueue::Submit(Clock::time_point deadline, Task task) {
  int64_t depth = 0;
  {
    MutexLock lock(&mu_);
    if (stopped_) return ShuttingDown("the daemon is shutting down");
    if (waiting_.size() >= capacity_) {
      return Busy("the compute queue is full (" + std::to_string(capacity_) + " waiting)");
    }
    waiting_.push_back(Item{deadline, std::move(task)});
    depth = static_cast<int64_t>(waiting_.size()) + running_;
  }
  cv_.notify_one();
  Publish(depth);
  return Status::Ok();
}

void ComputeQueue::Close() {
  std::deque<Item> cancelled;
  {
    MutexLock lock(&mu_);
    stopped_ = true;
    cancelled.swap(waiting_);
  }
  cv_.notify_all();
  for (auto& item : cancelled) item.task(ShuttingDown("the daemon is shutting down"));
}

void ComputeQueue::Stop() {
  Close();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
  Publish(0);
}

int64_t ComputeQueue::depth() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(waiting_.size()) + running_;
}

void ComputeQueue::Publish(int64_t depth) const {
  if (observer_) observer_(depth);
}

void ComputeQueue::WorkerLoop() {
  for (;;) {
    Item item;
    int64_t depth = 0;
    {
      MutexLock lock(&mu_);
      // condition_variable_any unlocks and relocks mu_ itself, so the lock stays held here.
      while (!stopped_ && waiting_.empty()) cv_.wait(mu_);
      if (waiting_.empty()) return;  // stopped and drained
      item = std::move(waiting_.front());
      waiting_.pop_front();
      ++running_;
      depth = static_cast<int64_t>(waiting_.size()) + running_;
    }
    Publish(depth);
    if (Clock::now() > item.deadline) {
      item.task(DeadlineExceeded("the request's deadline passed while it waited for a worker"));
    } else {
      item.task(Status::Ok());
    }
    {
      MutexLock lock(&mu_);
      --running_;
      depth = static_cast<int64_t>(waiting_.size()) + running_;
    }
    Publish(depth);
  }
}

}  // namespace hypic::server
