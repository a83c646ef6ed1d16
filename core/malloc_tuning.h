// Process-wide glibc malloc settings for hypic's processes (hypicd and the tools), called once
// at the start of main, before any thread starts.
//
// A pass over a long prompt allocates and frees buffers of MiB to tens of MiB (a 16k-position
// K/V state is 8 MiB per tensor). glibc serves allocations above its mmap threshold with fresh
// mmaps, and raises that threshold only after such a block has been freed (up to 32 MiB), so
// the same compose ran 3x slower in a fresh process (every buffer faulted in and zeroed by the
// kernel) than in one that had once run a large prefill (docs/benchmarks-history.md). Fixing
// the mmap threshold at the value a warmed process reaches makes the speed independent of the
// process's history: blocks below 32 MiB come from the heap and are reused. Up to 512 MiB of
// free heap top is kept per arena before it is returned to the system (glibc's dynamic rule
// would keep 64 MiB, and a 16k-token pass frees more than that between its layers, to fault
// it in again): what a pass used stays for the next one, as a compute thread keeps its
// scratch (gpu/model/cpu_kernels.h).
#pragma once

namespace hypic {

// Sets M_MMAP_THRESHOLD to 32 MiB and M_TRIM_THRESHOLD to 512 MiB. Returns false (and changes
// nothing further) when the C library refuses them; a no-op returning true elsewhere.
bool TuneMallocForLargeBuffers();

}  // namespace hypic
