// AMX tiles (Sapphire Rapids and later) for the CPU runtime's kernels: whether this process may
// use them, and the one tile configuration they all share (every tile 16 rows x 64 bytes: a
// 16 x 16 fp32 accumulator, 16 rows of 32 bf16, or 16 bf16 pairs of 16 columns).
//
// AmxUsable() checks CPUID (AMX-TILE, AMX-BF16) and oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA below
// AVX512_CORE_AMX turns off our AMX kernels as well as oneDNN's), and asks Linux once per
// process for the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA). A kernel holds a
// ScopedTiles while it uses the tiles; scopes nest on a thread (the outermost configures and
// releases), so a kernel may call another. Kernels that use tiles are compiled where HYPIC_AMX is
// defined (x86-64 Linux, GCC: the `amx-tile`/`amx-bf16` target attributes) and run only where
// AmxUsable(). Thread-safe: the tile state is per thread.
#pragma once

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define HYPIC_AMX 1
#endif

namespace hypic::cpu {

// The CPU has AMX-TILE and AMX-BF16, oneDNN's ISA cap allows them and the kernel lets this
// process use them (false where the build has no AMX kernels).
bool AmxUsable();

#ifdef HYPIC_AMX
// Holds the shared tile configuration on the constructing thread (REQUIRES: AmxUsable()); the
// outermost scope of a thread releases the tiles when it ends, so an idle thread has no tile
// state for the kernel to save.
class ScopedTiles {
 public:
  ScopedTiles();
  ~ScopedTiles();
  ScopedTiles(const ScopedTiles&) = delete;
  ScopedTiles& operator=(const ScopedTiles&) = delete;
};
#endif

}  // namespace hypic::cpu
