// vramdoc's two kernels, compiled to kernels/vramdoc.ptx by build_ptx.py (NVRTC) and loaded at
// run time with cuModuleLoadData, so users need neither nvcc nor NVRTC.
//
//   vramdoc_fill_u32(ptr, n_words, value)     every 32-bit word of ptr[0..n_words) := value
//   vramdoc_checksum_u32(ptr, n_words, out)   *out += sum of ptr[0..n_words) as 64-bit
//
// Both use grid-stride loops, so any launch shape covers any n_words. The caller zeroes *out
// before the checksum launch. crates/simgpu emulates these two kernels by name: keep the names
// and parameter lists in step with crates/gpu-spec/src/kernel.rs, src/gpu/cuda.rs and
// crates/simgpu/src/cuda/driver.rs.

extern "C" __global__ void vramdoc_fill_u32(unsigned int *ptr, unsigned long long n_words,
                                            unsigned int value)
{
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n_words; i += stride) {
        ptr[i] = value;
    }
}

extern "C" __global__ void vramdoc_checksum_u32(const unsigned int *ptr,
                                                unsigned long long n_words,
                                                unsigned long long *out)
{
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    unsigned long long sum = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n_words; i += stride) {
        sum += ptr[i];
    }
    if (sum != 0) {
        atomicAdd(out, sum);
    }
}
