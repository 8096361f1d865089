// LL8 cells for NVRAR's inter-node step on NVIDIA GPUs (loaded by kernels/nvrar/cuda.py
// through cupy.RawModule). The cell layout, flag rule and reductions are the ones of
// kernels/nvrar/cells.py and kernels/nvrar/reduce.py, which the CPU tests pin down; the
// GPU self-check (`make gpu-check`, suite/gpucheck/nvrar.py) compares the two.
//
// A cell is one 64-bit word: data in the low 32 bits, the call's sequence flag in the
// high 32 bits, written with one 8-byte store and read with one volatile 8-byte load, so
// a cell that shows the expected flag also shows its data.
//
// The call's sequence number lives in device memory (seq[0], bumped by ll8_begin), never
// in kernel arguments: a captured CUDA graph replays with fresh flags.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#define ERR_DATA 1
#define ERR_CREDIT 2

__device__ __forceinline__ u32 seq_flag(u64 t) { return (u32)((t - 1ull) % 0xFFFFFFFFull + 1ull); }

__device__ __forceinline__ u64 load_volatile(const u64* p) { return *((const volatile u64*)p); }

__device__ __forceinline__ u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A timeout is claimed with an atomic on a device word (claim) - the first failure wins -
// and then reported in mapped host memory (record = {kind, step, partner, seq}), kind
// written last so the host never reads a half-written record.
__device__ void record_error(long long* claim, long long* record, long long kind, int step,
                             int partner, u64 seq) {
  if (atomicCAS((unsigned long long*)claim, 0ull, 1ull) == 0ull) {
    volatile long long* r = record;
    r[1] = step;
    r[2] = partner;
    r[3] = (long long)seq;
    __threadfence_system();
    r[0] = kind;
    __threadfence_system();
  }
}

__device__ __forceinline__ bool failed(const long long* claim) {
  return *((const volatile long long*)claim) != 0;
}

// ---------------------------------------------------------------- element access

template <typename T> struct Bits;
template <> struct Bits<float> {
  static __device__ __forceinline__ float get(u32 b) { return __uint_as_float(b); }
  static __device__ __forceinline__ u32 put(float v) { return __float_as_uint(v); }
};
template <> struct Bits<int> {
  static __device__ __forceinline__ int get(u32 b) { return (int)b; }
  static __device__ __forceinline__ u32 put(int v) { return (u32)v; }
};
template <> struct Bits<__half> {
  static __device__ __forceinline__ __half get(u32 b) { return __ushort_as_half((u16)b); }
  static __device__ __forceinline__ u32 put(__half v) { return (u32)__half_as_ushort(v); }
};
template <> struct Bits<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 get(u32 b) { return __ushort_as_bfloat16((u16)b); }
  static __device__ __forceinline__ u32 put(__nv_bfloat16 v) { return (u32)__bfloat16_as_ushort(v); }
};

// fp32 arithmetic that keeps subnormals. CuPy appends -ftz=true to every NVRTC compile,
// after our options, so a plain a + b, a * b or a > b becomes add/mul/setp.ftz.f32 and
// flushes subnormal inputs and results to zero; numpy (the CPU reference, reduce.py)
// does not. Inline PTX without .ftz is not rewritten by the flag.
__device__ __forceinline__ float add_rn(float a, float b) {
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ bool greater(float a, float b) {  // a > b, subnormals kept
  u32 r;
  asm("{\n .reg .pred p;\n setp.gt.f32 p, %1, %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(r)
      : "f"(a), "f"(b));
  return r != 0u;
}
__device__ __forceinline__ bool is_nan(float a) { return (__float_as_uint(a) & 0x7FFFFFFFu) > 0x7F800000u; }

// OP: 0 sum, 1 prod, 2 max, 3 min. max/min propagate NaN like numpy (ties give b).
template <int OP> __device__ __forceinline__ float apply(float a, float b) {
  if (OP == 0) return add_rn(a, b);
  if (OP == 1) return mul_rn(a, b);
  if (OP == 2) return (greater(a, b) || is_nan(a)) ? a : b;
  return (greater(b, a) || is_nan(a)) ? a : b;
}

template <typename T, int OP> struct Combine {  // 16-bit floats: fp32 op, one rounding
  static __device__ __forceinline__ T run(T a, T b);
};
template <int OP> struct Combine<float, OP> {
  static __device__ __forceinline__ float run(float a, float b) { return apply<OP>(a, b); }
};
template <int OP> struct Combine<int, OP> {  // sum/prod wrap modulo 2^32 like MPI and numpy
  static __device__ __forceinline__ int run(int a, int b) {
    if (OP == 0) return (int)((u32)a + (u32)b);
    if (OP == 1) return (int)((u32)a * (u32)b);
    if (OP == 2) return a > b ? a : b;
    return a < b ? a : b;
  }
};
template <int OP> struct Combine<__half, OP> {
  static __device__ __forceinline__ __half run(__half a, __half b) {
    return __float2half_rn(apply<OP>(__half2float(a), __half2float(b)));
  }
};
template <int OP> struct Combine<__nv_bfloat16, OP> {
  static __device__ __forceinline__ __nv_bfloat16 run(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __float2bfloat16_rn(apply<OP>(__bfloat162float(a), __bfloat162float(b)));
  }
};

// ---------------------------------------------------------------- kernels

// One thread: start a call (seq += 1). Runs first on the main stream.
extern "C" __global__ void ll8_begin(u64* seq) { seq[0] += 1ull; }

// One thread: wait until the receiver of our step has consumed the previous call
// (credit >= seq - 1); credits are counters bumped by the receiver's SIGNAL_ADD of 1.
extern "C" __global__ void ll8_wait_credit(const u64* credit, const u64* seq, long long timeout_ns,
                                           long long* claim, long long* record, int step,
                                           int partner) {
  const u64 t = seq[0];
  const u64 t0 = globaltimer();
  while (load_volatile(credit) < t - 1ull) {
    if (failed(claim)) return;
    if (globaltimer() - t0 > (u64)timeout_ns) {
      record_error(claim, record, ERR_CREDIT, step, partner, t);
      return;
    }
  }
}

// Pack nbytes of src (4 per cell, a 2-byte tail zero-extended) with this call's flag.
extern "C" __global__ void ll8_pack(const unsigned char* src, u64 nbytes, u64* cells, u64 ncells,
                                    const u64* seq, const long long* claim) {
  if (failed(claim)) return;
  const u64 flag = (u64)seq_flag(seq[0]);
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < ncells; i += (u64)gridDim.x * blockDim.x) {
    const u64 off = 4ull * i;
    const u32 word = off + 4ull <= nbytes ? *(const u32*)(src + off) : (u32) * (const u16*)(src + off);
    cells[i] = (flag << 32) | word;
  }
}

// Wait for each cell of a receive region to carry this call's flag, then
// out = replace ? data : acc (op) data, and (when next != 0) pack out into the next
// step's send cells with the same flag: the reduction and the next pack are fused.
template <typename T, int OP>
__global__ void ll8_recv(const u64* cells, u64 ncells, const T* acc, T* out, u64 count, int replace,
                         u64* next, const u64* seq, long long timeout_ns, long long* claim,
                         long long* record, int step, int partner) {
  const int epc = 4 / (int)sizeof(T);
  const int lane_bits = 8 * (int)sizeof(T);
  const u64 t = seq[0];
  const u32 flag = seq_flag(t);
  if (failed(claim)) return;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < ncells; i += (u64)gridDim.x * blockDim.x) {
    u64 c = load_volatile(cells + i);
    if ((u32)(c >> 32) != flag) {
      const u64 t0 = globaltimer();
      unsigned spins = 0;
      while ((u32)((c = load_volatile(cells + i)) >> 32) != flag) {
        if ((++spins & 1023u) == 0u && failed(claim)) return;
        if (globaltimer() - t0 > (u64)timeout_ns) {
          record_error(claim, record, ERR_DATA, step, partner, t);
          return;
        }
      }
    }
    const u32 word = (u32)c;
    u32 packed = 0;
    for (int k = 0; k < epc; ++k) {
      const u64 e = i * epc + k;
      if (e >= count) break;
      const u32 lane = epc == 1 ? word : (word >> (lane_bits * k)) & 0xFFFFu;
      const T v = Bits<T>::get(lane);
      const T r = replace ? v : Combine<T, OP>::run(acc[e], v);
      out[e] = r;
      packed |= (epc == 1 ? Bits<T>::put(r) : (Bits<T>::put(r) & 0xFFFFu) << (lane_bits * k));
    }
    if (next != nullptr) next[i] = ((u64)flag << 32) | packed;
  }
}
