#include "gpu/cpu/gemm.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "gpu/cpu/amx.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/row_stable_gemm.h"

namespace hypic::cpu {
namespace {

using dnnl::memory;

[[noreturn]] void Fatal(const char* what, const dnnl::error& e) {
  std::fprintf(stderr, "hypic: oneDNN %s failed: %s (status %d)\n", what, e.what(),
               static_cast<int>(e.status));
  std::abort();
}

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

// oneDNN on OpenMP sizes its parallel regions by the calling thread's nthreads-var.
int UseComputeThreads() {
  const int threads = ComputeThreads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  return threads;
}

struct Key {
  memory::data_type dtype;
  Trans ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t alpha_bits, beta_bits;
  int threads;
  const memory::desc* b_layout;  // a packed weight's blocked layout; null: plain strides
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(key.dtype) << 2 | static_cast<uint64_t>(key.ta) << 1 |
        static_cast<uint64_t>(key.tb));
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc}) {
      mix(static_cast<uint64_t>(v));
    }
    mix(uint64_t{key.alpha_bits} << 32 | key.beta_bits);
    mix(static_cast<uint64_t>(key.threads));
    mix(reinterpret_cast<uintptr_t>(key.b_layout));
    return static_cast<size_t>(h);
  }
};

struct Primitive {
  memory::desc a, b, c, scratchpad;
  dnnl::matmul matmul;
};

// Each calling thread's scratchpad. The primitives run in user scratchpad mode: in library
// mode Debian's oneDNN (built without DNNL_ENABLE_CONCURRENT_EXEC) shares one scratchpad
// between primitives, and two threads running primitives at once corrupted each other's
// results.
std::byte* ThreadScratchpad(size_t bytes) {
  thread_local AlignedVector<std::byte> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

// The process-wide LRU of matmul primitives. Executing a primitive is thread-safe in oneDNN;
// an entry evicted while another thread runs it stays alive through its shared_ptr.
class PrimitiveCache {
 public:
  static constexpr size_t kCapacity = 4096;

  std::shared_ptr<const Primitive> Get(const Key& key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++hits_;
        return it->second->second;
      }
    }
    std::shared_ptr<const Primitive> made = Build(key);  // outside the lock: JIT takes a while
    if (made == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    ++built_;
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;  // another thread built it meanwhile
    lru_.emplace_front(key, made);
    index_.emplace(key, lru_.begin());
    if (lru_.size() > kCapacity) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return made;
  }

  GemmCacheStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {built_, hits_, lru_.size()};
  }

 private:
  static std::shared_ptr<const Primitive> Build(const Key& key) {
    // Row-major op(A) [m, k]: stored [m, k] (strides {lda, 1}) or as its transpose [k, m]
    // (strides {1, lda}); likewise op(B) [k, n].
    const memory::dims a_strides =
        key.ta == Trans::kNo ? memory::dims{key.lda, 1} : memory::dims{1, key.lda};
    const memory::dims b_strides =
        key.tb == Trans::kNo ? memory::dims{key.ldb, 1} : memory::dims{1, key.ldb};
    auto p = std::make_shared<Primitive>();
    p->a = memory::desc({key.m, key.k}, key.dtype, a_strides);
    p->b = key.b_layout != nullptr ? *key.b_layout
                                   : memory::desc({key.k, key.n}, key.dtype, b_strides);
    p->c = memory::desc({key.m, key.n}, memory::data_type::f32, {key.ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    float alpha, beta;
    std::memcpy(&alpha, &key.alpha_bits, sizeof alpha);
    std::memcpy(&beta, &key.beta_bits, sizeof beta);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a, p->b, p->c), attr, Engine());
      p->matmul = dnnl::matmul(pd);
      p->scratchpad = pd.scratchpad_desc();
    } catch (const dnnl::error& e) {
      // A packed layout that no implementation takes at this row count: the caller unpacks.
      if (key.b_layout != nullptr && e.status == dnnl_unimplemented) return nullptr;
      Fatal("matmul creation", e);
    }
    return p;
  }

  using Entry = std::pair<Key, std::shared_ptr<const Primitive>>;
  std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
  uint64_t built_ = 0, hits_ = 0;
};

PrimitiveCache& Cache() {
  static PrimitiveCache* cache = new PrimitiveCache;  // never destroyed: used until exit
  return *cache;
}

template <typename T>
struct PadBuffers {  // on cache lines, as the operands AMX tiles load and store
  AlignedVector<T> a;
  AlignedVector<float> c;
};

// The calling thread's buffers for RunPadded, one pair per operand type whoever runs padded.
template <typename T>
PadBuffers<T>& ThreadPadBuffers() {
  thread_local PadBuffers<T> buffers;
  return buffers;
}

// Runs a product of `rows` rows as one call of `call_rows` > rows: run(a, lda, c, ldc) on copies
// of op(A)'s rows (A stored [m, k], or with ta [k, m]: k rows of m) and, when beta reads C, of
// C's rows, in the calling thread's buffers, then C's rows copied back. The copies keep the
// product's own strides (oneDNN's fp32 kernels sum a row in another order at another lda; a
// transposed A's stride grows to call_rows where it is smaller). The rows past `rows` keep
// whatever earlier calls left there: a row of C depends only on its own row of A (and of C),
// and those rows are dropped, so nothing is cleared per call (the chunked form's seam steps
// make thousands of these calls in a compose).
template <typename T, typename Run>
void RunPadded(Trans ta, int64_t rows, int64_t call_rows, int64_t n, int64_t k, const T* a,
               int64_t lda, float beta, float* c, int64_t ldc, const Run& run) {
  PadBuffers<T>& buffers = ThreadPadBuffers<T>();
  AlignedVector<T>& a_pad = buffers.a;
  AlignedVector<float>& c_pad = buffers.c;
  const int64_t lda_pad = ta == Trans::kNo ? lda : std::max(lda, call_rows);
  const int64_t a_size = (ta == Trans::kNo ? call_rows : k) * lda_pad;
  if (a_pad.size() < static_cast<size_t>(a_size)) a_pad.resize(static_cast<size_t>(a_size));
  if (c_pad.size() < static_cast<size_t>(call_rows * ldc)) {
    c_pad.resize(static_cast<size_t>(call_rows * ldc));
  }
  if (ta == Trans::kNo) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(a + r * lda, k, a_pad.data() + r * lda_pad);
  } else {
    for (int64_t i = 0; i < k; ++i) std::copy_n(a + i * lda, rows, a_pad.data() + i * lda_pad);
  }
  if (beta != 0.0f) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(c + r * ldc, n, c_pad.data() + r * ldc);
  }
  run(a_pad.data(), lda_pad, c_pad.data(), ldc);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(c_pad.data() + r * ldc, n, c + r * ldc);
}

// How CachedGemm splits m rows into calls. Blocks of kGemmRowBlock, then the rest: as one
// multiple of 16 and a tail of fewer than 16 rows, or (merge_rest) as one call. With pad, no
// call has a partial group of 16: the tail or the merged rest runs padded to a multiple of 16.
// So a row's bits do not hang on how many rows its call has: oneDNN's kernels for a partial
// group (and its gemv for one row) sum in another order than for whole groups on some shapes
// (fp32 with lda != k on a Xeon: every row of an 11-row tail differed from the same row in a
// bigger call).
struct RowSplit {
  bool pad = false;         // every call a multiple of 16 rows (A is row-major, copyable)
  bool merge_rest = false;  // the rest as one call (cheaper than reading B twice)
};

// Calls fn(row0, rows, call_rows) for each call of the split: rows of the product from row0,
// run as call_rows >= rows (the caller pads rows [rows, call_rows)).
template <typename Fn>
void ForEachRowBlock(int64_t m, RowSplit split, const Fn& fn) {
  const auto padded = [&](int64_t rows) { return split.pad ? (rows + 15) & ~int64_t{15} : rows; };
  int64_t row = 0;
  for (; row + kGemmRowBlock <= m; row += kGemmRowBlock) fn(row, kGemmRowBlock, kGemmRowBlock);
  if (row == m) return;
  if (split.merge_rest) {
    fn(row, m - row, padded(m - row));
    return;
  }
  const int64_t sixteens = (m - row) & ~int64_t{15};
  if (sixteens > 0) {
    fn(row, sixteens, sixteens);
    row += sixteens;
  }
  if (row < m) fn(row, m - row, padded(m - row));
}

// CachedGemm's split: pad where A's rows can be copied (not transposed); merge the rest when
// it ends in a partial group after at least one whole group (two calls otherwise, each reading
// all of B) and copying it and its C rows costs less than reading B once more. A compose's
// products are mostly such rests (an expert's ~40 rows were 32 + 8, the weight read twice):
// 211 calls a compose instead of 365.
template <typename T>
RowSplit SplitRows(Trans ta, int64_t m, int64_t n, int64_t k) {
  const int64_t rest = m % kGemmRowBlock;
  const auto b_bytes = static_cast<uint64_t>(n) * static_cast<uint64_t>(k) * sizeof(T);
  const auto copy_bytes = static_cast<uint64_t>(rest) * (static_cast<uint64_t>(n) * sizeof(float) +
                                                         static_cast<uint64_t>(k) * sizeof(T));
  RowSplit split;
  split.pad = ta == Trans::kNo;
  split.merge_rest = split.pad && rest > 16 && rest % 16 != 0 && copy_bytes <= b_bytes;
  return split;
}

// C <- beta C, the whole product when k == 0.
void ScaleOnly(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) {
    float* row = c + r * ldc;
    for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
}

// Runs the product on cached primitives, row block by row block. With b_layout (a packed
// weight), returns false, having written nothing, when no implementation takes that layout.
template <typename T>
bool CachedGemm(memory::data_type dtype, Trans ta, Trans tb, int64_t m, int64_t n, int64_t k,
                float alpha, const T* a, int64_t lda, const T* b, int64_t ldb, float beta, float* c,
                int64_t ldc, const memory::desc* b_layout = nullptr) {
  if (m <= 0 || n <= 0) return true;
  if (k <= 0) {
    ScaleOnly(m, n, beta, c, ldc);
    return true;
  }
  const int threads = UseComputeThreads();
  Key key{dtype, ta, tb, 0, n, k, lda, ldb, ldc, 0, 0, threads, b_layout};
  std::memcpy(&key.alpha_bits, &alpha, sizeof alpha);
  std::memcpy(&key.beta_bits, &beta, sizeof beta);
  const RowSplit split = SplitRows<T>(ta, m, n, k);
  if (b_layout != nullptr) {
    // Every block's primitive first, so that a layout no implementation takes leaves C as it
    // was (blocks of one product share at most three shapes).
    bool ok = true;
    ForEachRowBlock(m, split, [&](int64_t, int64_t, int64_t call_rows) {
      key.m = call_rows;
      ok = ok && Cache().Get(key) != nullptr;
    });
    if (!ok) return false;
  }
  dnnl::stream& stream = ThreadStream();
  ForEachRowBlock(m, split, [&](int64_t row0, int64_t rows, int64_t call_rows) {
    key.m = call_rows;
    std::shared_ptr<const Primitive> p = Cache().Get(key);
    const T* a_rows = ta == Trans::kNo ? a + row0 * lda : a + row0;
    float* c_rows = c + row0 * ldc;
    const auto execute = [&](const T* a_call, float* c_call) {
      try {
        memory am(p->a, Engine(), const_cast<T*>(a_call));
        memory bm(p->b, Engine(), const_cast<T*>(b));
        memory cm(p->c, Engine(), c_call);
        memory sm(p->scratchpad, Engine(), ThreadScratchpad(p->scratchpad.get_size()));
        p->matmul.execute(stream, {{DNNL_ARG_SRC, am},
                                   {DNNL_ARG_WEIGHTS, bm},
                                   {DNNL_ARG_DST, cm},
                                   {DNNL_ARG_SCRATCHPAD, sm}});
        stream.wait();
      } catch (const dnnl::error& e) {
        Fatal("matmul", e);
      }
    };
    if (call_rows == rows) return execute(a_rows, c_rows);
    // Only a row-major A is padded (SplitRows): its copy keeps lda, the primitive's.
    RunPadded<T>(ta, rows, call_rows, n, k, a_rows, lda, beta, c_rows, ldc,
                 [&](const T* a_pad, int64_t, float* c_pad, int64_t) { execute(a_pad, c_pad); });
  });
  return true;
}

// The plain layout of a weight W [n, k] as matmul's B [k, n]: W's rows are B's columns.
memory::desc PlainWeight(int64_t n, int64_t k) {
  return memory::desc({k, n}, memory::data_type::bf16, memory::dims{1, k});
}

// The blocked layout oneDNN's matmul prefers for a bf16 weight of (n, k), asked once per shape
// of a primitive of kGemmRowBlock rows, and kept for the process: every packed weight of that
// shape and every primitive that reads one share it.
const memory::desc* PackedLayout(int64_t n, int64_t k) {
  static std::mutex mu;
  static auto* layouts = new std::unordered_map<uint64_t, std::unique_ptr<memory::desc>>;
  const uint64_t id = static_cast<uint64_t>(n) << 32 | static_cast<uint64_t>(k);
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<memory::desc>& layout = (*layouts)[id];
  if (layout == nullptr) {
    UseComputeThreads();
    const memory::desc a({kGemmRowBlock, k}, memory::data_type::bf16, memory::dims{k, 1});
    const memory::desc any({k, n}, memory::data_type::bf16, memory::format_tag::any);
    const memory::desc c({kGemmRowBlock, n}, memory::data_type::f32, memory::dims{n, 1});
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, any, c), Engine());
      layout = std::make_unique<memory::desc>(pd.weights_desc());
    } catch (const dnnl::error& e) {
      Fatal("matmul creation (packed layout)", e);
    }
  }
  return layout.get();
}

// oneDNN's BA16a64b2a for a [k, n] bf16 operand (AmxGemmRows' layout: amx_gemm.h).
bool IsAmxBlocked(const memory::desc& layout) {
  const dnnl_memory_desc_t& d = layout.data;
  if (d.format_kind != dnnl_blocked || d.ndims != 2) return false;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  return b.inner_nblks == 3 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 &&
         b.inner_blks[1] == 64 && b.inner_idxs[1] == 1 && b.inner_blks[2] == 2 &&
         b.inner_idxs[2] == 0;
}

void Reorder(const memory::desc& from, const void* src, const memory::desc& to, void* dst) {
  try {
    memory s(from, Engine(), const_cast<void*>(src)), d(to, Engine(), dst);
    dnnl::stream& stream = ThreadStream();
    dnnl::reorder(s, d).execute(stream, s, d);
    stream.wait();
  } catch (const dnnl::error& e) {
    Fatal("reorder", e);
  }
}

std::string IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return fmt::format("isa 0x{:x}", static_cast<int>(isa));
  }
}

std::string KernelName(memory::data_type dtype) {
  constexpr int64_t n = 2048;
  const memory::desc a({n, n}, dtype, {n, 1}), b({n, n}, dtype, {1, n});
  const memory::desc c({n, n}, memory::data_type::f32, {n, 1});
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), Engine());
    return pd.impl_info_str();
  } catch (const dnnl::error& e) {
    return fmt::format("none ({})", e.what());
  }
}

// Whether oneDNN's effective ISA (the CPU's, under ONEDNN_MAX_CPU_ISA) includes `isa`.
bool EffectiveIsaIncludes(dnnl::cpu_isa isa) {
  const auto have = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (have & static_cast<unsigned>(isa)) == static_cast<unsigned>(isa);
}

// Whether oneDNN's fp32 kernels give a row the same bits whatever its call's shape: on
// AVX-512 (the brgemm matmul, the AVX-512 sgemm) they do; below it, the AVX2 `gemm:jit` does
// not, and fp32 products go to RowStableGemm (row_stable_gemm.h).
bool OneDnnRowStable() {
  static const bool stable = EffectiveIsaIncludes(dnnl::cpu_isa::avx512_core);
  return stable;
}

// Whether the bf16 products run on oneDNN: where the CPU has bf16 instructions (AMX-BF16,
// AVX512-BF16). Elsewhere RowStableGemm widens the operands to fp32. On AVX2-only CPUs (Zen 3,
// Haswell to Ice Lake client parts) oneDNN 2.6 has no bf16 matmul. On avx512_core alone
// (Skylake to Ice Lake servers) it emulates one (`gemm:jit`), and that is both slower and not
// row-stable: on the Xeon capped to AVX512_CORE, 73 GFLOP/s against RowStableGemm's 229-254
// on 2,048 x 2,048 x 2,048 and 2,048 x 1,552 x 512 (2 threads), and with n <= 64 at k >= 2,048
// a call of up to 40 rows summed each row in another order than a 2,048-row call.
bool NativeBf16Matmul() {
  static const bool native = EffectiveIsaIncludes(dnnl::cpu_isa::avx512_core_bf16);
  return native;
}

}  // namespace

void Gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!OneDnnRowStable())
    return RowStableGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (n <= kGemmSmallDim && k <= kGemmSmallDim) {
    return GemmAnyShape(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  CachedGemm(memory::data_type::f32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {

// A bf16 product of m rows of A through run(ta, m, a, lda, c, ldc). oneDNN 2.6 runs a one-row
// bf16 matmul on a gemv kernel that, on AMX machines, rounds differently from the same row
// inside a larger call. CachedGemm pads a row-major A's lone row to 16 itself (RowSplit); a
// transposed A's lone row, which it cannot pad, goes here as two rows, the second zero, so its
// bits are the same as in a prefill's (tests/gpu/cpu/gemm_test.cpp).
template <typename Run>
void Bf16Rows(Trans ta, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, float beta,
              float* c, int64_t ldc, const Run& run) {
  if (m != 1 || k <= 0 || ta == Trans::kNo) return run(ta, m, a, lda, c, ldc);
  thread_local AlignedVector<uint16_t> a2;
  thread_local AlignedVector<float> c2;
  a2.assign(static_cast<size_t>(2 * k), 0);
  for (int64_t i = 0; i < k; ++i) a2[static_cast<size_t>(i)] = a[ta == Trans::kNo ? i : i * lda];
  c2.assign(static_cast<size_t>(2 * n), 0.0f);
  if (beta != 0.0f) std::copy(c, c + n, c2.begin());
  run(Trans::kNo, 2, a2.data(), k, c2.data(), n);
  std::copy(c2.begin(), c2.begin() + n, c);
}

}  // namespace

void Gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
          int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // Without a bf16 matmul (CPUs without AVX-512), RowStableGemm widens both operands to fp32
  // as it packs them: the bf16 product up to the order of its fp32 sums, and row-stable.
  if (!NativeBf16Matmul())
    return RowStableGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  Bf16Rows(ta, m, n, k, a, lda, beta, c, ldc,
           [&](Trans t, int64_t rows, const uint16_t* x, int64_t ldx, float* y, int64_t ldy) {
             CachedGemm(memory::data_type::bf16, t, tb, rows, n, k, alpha, x, ldx, b, ldb, beta, y,
                        ldy);
           });
}

PackedBf16Weight::PackedBf16Weight(const uint16_t* w, int64_t n, int64_t k)
    : n_(n), k_(k), layout_(NativeBf16Matmul() ? PackedLayout(n, k) : nullptr) {
  bytes_ = layout_ != nullptr
               ? static_cast<const memory::desc*>(layout_)->get_size()
               : static_cast<size_t>(RowStablePanelElements(n, k)) * sizeof(uint16_t);
  data_ = std::aligned_alloc(64, (bytes_ + 63) / 64 * 64);
  if (data_ == nullptr) throw std::bad_alloc();
  if (layout_ == nullptr) {
    PackRowStablePanels(w, n, k, static_cast<uint16_t*>(data_));
    return;
  }
  const auto& layout = *static_cast<const memory::desc*>(layout_);
  Reorder(PlainWeight(n, k), w, layout, data_);
  if (AmxUsable() && AmxGemmTakes(n, k) && IsAmxBlocked(layout)) {
    const auto& strides = layout.data.format_desc.blocking.strides;
    amx_k_stride_ = strides[0];
    amx_n_stride_ = strides[1];
  }
}

PackedBf16Weight::~PackedBf16Weight() { std::free(data_); }

void PackedBf16Weight::Unpack(uint16_t* w) const {
  if (layout_ == nullptr)
    return UnpackRowStablePanels(static_cast<const uint16_t*>(data_), n_, k_, w);
  Reorder(*static_cast<const memory::desc*>(layout_), data_, PlainWeight(n_, k_), w);
}

void Gemm(int64_t m, float alpha, const uint16_t* a, int64_t lda, const PackedBf16Weight& w,
          float beta, float* c, int64_t ldc) {
  const int64_t n = w.n(), k = w.k();
  if (const std::optional<AmxBlockedWeight> amx = w.amx_blocked();
      amx && m > 0 && alpha == 1.0f && beta == 0.0f && lda == k && ldc == n) {
    // A partial group of 16 runs on padded copies of its rows: all of a few rows' product
    // (one pass over the weight), only the last group's rows of a bigger one.
    const int64_t whole = m % 16 == 0 || m > kAmxPanelRows ? m / 16 * 16 : 0;
    if (whole > 0) AmxGemmRows(whole, a, lda, *amx, c, ldc);
    if (whole == m) return;
    const int64_t rest = m - whole, rows = (rest + 15) / 16 * 16;
    return RunPadded<uint16_t>(
        Trans::kNo, rest, rows, n, k, a + whole * lda, lda, beta, c + whole * ldc, ldc,
        [&](const uint16_t* a_pad, int64_t lda_pad, float* c_pad, int64_t ldc_pad) {
          AmxGemmRows(rows, a_pad, lda_pad, *amx, c_pad, ldc_pad);
        });
  }
  OneDnnGemm(m, alpha, a, lda, w, beta, c, ldc);
}

void OneDnnGemm(int64_t m, float alpha, const uint16_t* a, int64_t lda, const PackedBf16Weight& w,
                float beta, float* c, int64_t ldc) {
  const int64_t n = w.n(), k = w.k();
  const auto* layout = static_cast<const memory::desc*>(w.layout());
  const auto* b = static_cast<const uint16_t*>(w.data());
  if (layout == nullptr) return RowStableGemmPanels(m, n, k, alpha, a, lda, b, beta, c, ldc);
  // A row-major A: CachedGemm pads a lone row itself (no Bf16Rows needed).
  if (CachedGemm(memory::data_type::bf16, Trans::kNo, Trans::kYes, m, n, k, alpha, a, lda, b, k,
                 beta, c, ldc, layout)) {
    return;
  }
  // No implementation reads the packed layout at this row count: the plain one.
  thread_local std::vector<uint16_t> plain;
  plain.resize(static_cast<size_t>(n * k));
  w.Unpack(plain.data());
  CachedGemm(memory::data_type::bf16, Trans::kNo, Trans::kYes, m, n, k, alpha, a, lda, plain.data(),
             k, beta, c, ldc);
}

void GemmRoundingA(int64_t m, float alpha, const float* a, int64_t lda, const PackedBf16Weight& w,
                   float beta, float* c, int64_t ldc, AlignedVector<uint16_t>* a_bf16) {
  const int64_t n = w.n(), k = w.k();
  if (w.layout() == nullptr) {
    return RowStableGemmPanelsRoundingA(m, n, k, alpha, a, lda,
                                        static_cast<const uint16_t*>(w.data()), beta, c, ldc);
  }
  if (a_bf16->size() < static_cast<size_t>(m * k)) a_bf16->resize(static_cast<size_t>(m * k));
  uint16_t* const ab = a_bf16->data();
  ParallelFor(m, 64, [&](int64_t r0, int64_t r1) {
    ConvertRowsToBf16(a + r0 * lda, lda, r1 - r0, k, ab + r0 * k, k);
  });
  Gemm(m, alpha, ab, k, w, beta, c, ldc);
}

namespace {

// oneDNN 2.6's sgemm runs calls of fewer than kSgemmStableRows rows on other kernels than
// larger calls, which sum a row in another order (every shape probed on AVX-512, Intel and
// AMD): such a call goes as kSgemmStableRows rows (RunPadded), so a row's bits are the same
// in a chunk's tail, a seam's few rows or a decode step as in a prefill's bigger calls.
constexpr int64_t kSgemmStableRows = 16;

void PaddedSgemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  RunPadded<float>(ta, m, kSgemmStableRows, n, k, a, lda, beta, c, ldc,
                   [&](const float* a_pad, int64_t lda_pad, float* c_pad, int64_t ldc_pad) {
                     OneDnnSgemm(ta, tb, kSgemmStableRows, n, k, alpha, a_pad, lda_pad, b, ldb,
                                 beta, c_pad, ldc_pad);
                   });
}

}  // namespace

namespace {

// Rows [i, i + R) of C's columns [j0, j0 + W) for GemmFewRows: op(A)'s rows (element l of
// row r at a[r * a_row + l * a_step]) against op(B) stored [k, n] (row stride ldb), the R x W
// sums in registers (fully unrolled), each loaded row of B used by all R rows. Each sum is one
// chain of fused multiply-adds over l in order, written out (left to the compiler, the
// contraction differed between tile shapes), so a row's bits do not depend on R or W.
template <int R, int W>
void FewRowsTile(const float* a, int64_t a_row, int64_t a_step, int64_t k, const float* b,
                 int64_t ldb, int64_t j0, float alpha, float beta, float* c, int64_t ldc) {
  float acc[R][W] = {};
  for (int64_t l = 0; l < k; ++l) {
    const float* bl = b + l * ldb + j0;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float x = a[r * a_row + l * a_step];
#pragma GCC unroll 64
      for (int j = 0; j < W; ++j) acc[r][j] = std::fma(x, bl[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* cj = c + r * ldc + j0;
    if (beta == 0.0f) {  // C is not read: it may hold anything
      for (int j = 0; j < W; ++j) cj[j] = alpha * acc[r][j];
    } else {
      for (int j = 0; j < W; ++j) cj[j] = alpha * acc[r][j] + beta * cj[j];
    }
  }
}

// Rows [i, i + R) of C, every column: tiles of 64, 16, then single columns.
template <int R>
void FewRowsRows(const float* a, int64_t a_row, int64_t a_step, int64_t n, int64_t k,
                 const float* b, int64_t ldb, float alpha, float beta, float* c, int64_t ldc) {
  int64_t j0 = 0;
  for (; j0 + 64 <= n; j0 += 64)
    FewRowsTile<R, 64>(a, a_row, a_step, k, b, ldb, j0, alpha, beta, c, ldc);
  for (; j0 + 16 <= n; j0 += 16)
    FewRowsTile<R, 16>(a, a_row, a_step, k, b, ldb, j0, alpha, beta, c, ldc);
  for (; j0 < n; ++j0) FewRowsTile<R, 1>(a, a_row, a_step, k, b, ldb, j0, alpha, beta, c, ldc);
}

// C[i, j] for op(B) = B^T (B stored [n, k]) and a contiguous row of A: a dot product over k in
// 16 lanes, summed lane by lane in one fixed order.
float FewRowsDot(const float* a_row, const float* b_row, int64_t k) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t l = 0;
  for (; l + kLanes <= k; l += kLanes) {
#pragma GCC unroll 16
    for (int q = 0; q < kLanes; ++q) acc[q] += a_row[l + q] * b_row[l + q];
  }
  for (int q = 0; l < k; ++l, ++q) acc[q] += a_row[l] * b_row[l];
#pragma GCC unroll 4
  for (int width = kLanes / 2; width > 0; width /= 2) {
#pragma GCC unroll 8
    for (int q = 0; q < width; ++q) acc[q] += acc[q + width];
  }
  return acc[0];
}

}  // namespace

void GemmFewRows(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m, n, beta, c, ldc);
  if (ta == Trans::kNo && tb == Trans::kYes) {  // rows of A against rows of B: dot products
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float dot = FewRowsDot(a + i * lda, b + j * ldb, k);
        float& cij = c[i * ldc + j];
        cij = beta == 0.0f ? alpha * dot : alpha * dot + beta * cij;  // beta 0: C is not read
      }
    }
    return;
  }
  // op(B) as [k, n] rows: B itself, or its transpose copied (n x k, a few KiB here).
  thread_local std::vector<float> b_rows;
  if (tb == Trans::kYes) {
    b_rows.resize(static_cast<size_t>(k * n));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t l = 0; l < k; ++l) b_rows[static_cast<size_t>(l * n + j)] = b[j * ldb + l];
    }
    b = b_rows.data();
    ldb = n;
  }
  // Row i of op(A): a[i, l] at a + i * lda + l, or a[l, i] at a + l * lda + i.
  const int64_t a_row = ta == Trans::kNo ? lda : 1, a_step = ta == Trans::kNo ? 1 : lda;
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    FewRowsRows<4>(a + i * a_row, a_row, a_step, n, k, b, ldb, alpha, beta, c + i * ldc, ldc);
  }
  for (; i < m; ++i) {
    FewRowsRows<1>(a + i * a_row, a_row, a_step, n, k, b, ldb, alpha, beta, c + i * ldc, ldc);
  }
}

void GemmAnyShape(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m, n, beta, c, ldc);
  if (!OneDnnRowStable())
    return RowStableGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (m < kSgemmStableRows)
    return PaddedSgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  OneDnnSgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void OneDnnSgemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m, n, beta, c, ldc);
  UseComputeThreads();
  const dnnl_status_t st = dnnl_sgemm(ta == Trans::kNo ? 'N' : 'T', tb == Trans::kNo ? 'N' : 'T', m,
                                      n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (st != dnnl_success) {
    std::fprintf(stderr, "hypic: dnnl_sgemm failed (status %d)\n", static_cast<int>(st));
    std::abort();
  }
}

void ConvertRowsToBf16(const float* src, int64_t lds, int64_t rows, int64_t cols, uint16_t* dst,
                       int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * lds;
    uint16_t* d = dst + r * ldd;
    int64_t j = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    for (; j + 16 <= cols; j += 16) {
      const __m256bh packed = _mm512_cvtneps_pbh(_mm512_loadu_ps(s + j));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + j),
                          reinterpret_cast<const __m256i&>(packed));
    }
#endif
    for (; j < cols; ++j) d[j] = F32ToBf16(s[j]);
  }
}

const GemmInfo& DescribeGemm() {
  static const GemmInfo info = [] {
    GemmInfo i;
    const dnnl_version_t* v = dnnl_version();
    i.library = fmt::format("onednn {}.{}.{}", v->major, v->minor, v->patch);
    i.f32_kernel = OneDnnRowStable()
                       ? KernelName(memory::data_type::f32)
                       : "hypic row-stable (oneDNN's " + KernelName(memory::data_type::f32) +
                             " is not row-stable here)";
    i.bf16_kernel = NativeBf16Matmul() ? KernelName(memory::data_type::bf16)
                                       : "hypic row-stable (operands widened to f32)";
    i.cpu_isa = IsaName(dnnl::get_effective_cpu_isa());
    i.f32_onednn = OneDnnRowStable();
    i.bf16_native = NativeBf16Matmul();
    // PackedBf16Weight takes AmxGemmRows wherever oneDNN packs for its AMX kernels.
    i.bf16_packed_amx = i.bf16_native && AmxUsable() && IsAmxBlocked(*PackedLayout(64, 64));
    return i;
  }();
  return info;
}

std::string GemmSummary() {
  const GemmInfo& i = DescribeGemm();
  return fmt::format("{}, f32 {}, bf16 {} (isa {}){}", i.library, i.f32_kernel, i.bf16_kernel,
                     i.cpu_isa, i.bf16_packed_amx ? ", bf16 packed: hypic amx" : "");
}

GemmCacheStats GemmCacheCounters() { return Cache().Stats(); }

}  // namespace hypic::cpu
