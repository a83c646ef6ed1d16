// The GEMM peaks a benchmark quotes its efficiency against: fp32 and bf16 -> fp32 products at
// 2048^3, measured in the same run with the best GEMM on the machine (oneDNN through
// gpu/cpu/gemm.h, which the runtime uses too) at the calling thread's compute budget, plus
// the kernels oneDNN chose. The fp32 peak is the faster of the runtime's fp32 product and
// oneDNN's sgemm (they differ where the runtime runs RowStableGemm: CPUs without AVX-512).
// The bf16 peak is oneDNN's faster of a plain-layout B and a B packed in
// its blocked layout (cpu::PackedBf16Weight, as the model's weights are held; cpu::OneDnnGemm,
// not the runtime's AMX kernel): the packed one skips oneDNN's per-call copy of B, 10-13%
// faster on an AMX Xeon (2026-12-02). On a CPU without bf16 instructions both are
// RowStableGemm's widened product, which beats oneDNN's emulation there 3x (gemm.h).
// Header-only; thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/aligned_vector.h"
#include "core/dtype.h"
#include "gpu/cpu/gemm.h"
#include "tools/hypic-bench/bench_timing.h"

namespace hypic::tools {

struct GemmPeaks {
  Timing f32;           // GFLOP/s per wall second (wall) and per CPU second (cpu)
  Timing bf16;          // likewise
  std::string kernels;  // cpu::GemmSummary()
};

// The fastest of `reps` (REQUIRES: reps >= 1) after one untimed warm-up each: a peak is what
// the library reaches, and on a shared machine other jobs only slow a run down (a median of 3
// moved the bf16 peak 1,188-1,540 GFLOP/s between runs of one session on the AMX Xeon,
// 2026-12-07, and every efficiency quoted against it with it).
inline GemmPeaks MeasureGemmPeaks(int reps = 7) {
  constexpr int64_t n = 2048;
  const auto size = static_cast<size_t>(n * n);
  // On cache lines, as the runtime's own operands (core/aligned_vector.h): from a malloc'd
  // vector oneDNN's AMX tiles load and store rows that span two lines, and the "peak" was the
  // library slowed down, not its best.
  AlignedVector<float> a(size), b(size), c(size);
  for (size_t i = 0; i < size; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.01f;
    b[i] = static_cast<float>(i % 13) * 0.01f;
  }
  AlignedVector<uint16_t> a16(size), b16(size);
  cpu::ConvertRowsToBf16(a.data(), n, n, n, a16.data(), n);
  cpu::ConvertRowsToBf16(b.data(), n, n, n, b16.data(), n);
  const double flop = 2.0 * static_cast<double>(n * n * n);
  auto rate = [&](auto&& product) {
    product();
    const Timing t = FastestTiming(reps, CpuClock::kProcess, product);
    return Timing{flop / t.wall / 1e9, flop / t.cpu / 1e9};
  };
  GemmPeaks p;
  const Timing runtime_f32 = rate([&] {
    cpu::Gemm(cpu::Trans::kNo, cpu::Trans::kYes, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
              c.data(), n);
  });
  const Timing onednn_f32 = rate([&] {
    cpu::OneDnnSgemm(cpu::Trans::kNo, cpu::Trans::kYes, n, n, n, 1.0f, a.data(), n, b.data(), n,
                     0.0f, c.data(), n);
  });
  p.f32 = {std::max(runtime_f32.wall, onednn_f32.wall), std::max(runtime_f32.cpu, onednn_f32.cpu)};
  const Timing plain = rate([&] {
    cpu::Gemm(cpu::Trans::kNo, cpu::Trans::kYes, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f,
              c.data(), n);
  });
  const cpu::PackedBf16Weight packed_b(b16.data(), n, n);
  const Timing packed =
      rate([&] { cpu::OneDnnGemm(n, 1.0f, a16.data(), n, packed_b, 0.0f, c.data(), n); });
  p.bf16 = {std::max(plain.wall, packed.wall), std::max(plain.cpu, packed.cpu)};
  p.kernels = cpu::GemmSummary();
  return p;
}

}  // namespace hypic::tools
