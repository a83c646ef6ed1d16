// HYPIC_HD marks small inline functions that run on the host and, in CUDA builds, on the
// device. The math lives in such functions so the CPU tests exercise the code the kernels call.
#pragma once

#if defined(__CUDACC__)
#define HYPIC_HD __host__ __device__
#define HYPIC_HD_INLINE __host__ __device__ __forceinline__
#else
#define HYPIC_HD
#define HYPIC_HD_INLINE inline
#endif
