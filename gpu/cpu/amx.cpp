#include "gpu/cpu/amx.h"

#ifdef HYPIC_AMX
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "dnnl.hpp"
#endif

namespace hypic::cpu {

#ifdef HYPIC_AMX
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

thread_local int tile_scopes = 0;  // ScopedTiles alive on this thread

}  // namespace

bool AmxUsable() {
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
    if ((d & kAmxBf16) == 0 || (d & kAmxTile) == 0) return false;
    // oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA, or dnnl::set_max_cpu_isa before its first use)
    // keeps AMX from our kernels too: one knob for every kernel of the process.
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    if ((isa & amx) != amx) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

[[gnu::target("amx-tile")]] ScopedTiles::ScopedTiles() {
  if (tile_scopes++ > 0) return;
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC 12 treats ldtilecfg as reading less than its 64 bytes and drops the stores of the rows
  // and widths when this is inlined (the tiles then fault, SIGILL, on first use); the barrier
  // makes every store of cfg happen first.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

[[gnu::target("amx-tile")]] ScopedTiles::~ScopedTiles() {
  if (--tile_scopes == 0) _tile_release();
}
#else
bool AmxUsable() { return false; }
#endif

}  // namespace hypic::cpu
