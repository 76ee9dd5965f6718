//! The contents of a process's device memory: allocations up to [`super::BACKED_LIMIT`] are
//! backed by host memory; larger ones hold a uniform 32-bit pattern (what the fill kernel
//! writes), so a 40 GiB allocation costs no host RAM. Kernels are emulated by name
//! (`vramdoc_fill_u32`, `vramdoc_checksum_u32`, see kernels/vramdoc.cu).

use super::{Allocation, Contents, SimProcess, BACKED_LIMIT};
use crate::SimError;
use vramdoc_gpu_spec::kernel;

impl SimProcess {
    fn find(&mut self, ptr: u64, len: u64) -> Result<(&mut Allocation, u64), SimError> {
        let (base, alloc) = self
            .allocations
            .range_mut(..=ptr)
            .next_back()
            .ok_or(SimError::InvalidPointer(ptr))?;
        let offset = ptr - *base;
        if offset >= alloc.size.max(1) {
            return Err(SimError::InvalidPointer(ptr));
        }
        if offset + len > alloc.size {
            return Err(SimError::OutOfBounds { ptr, len });
        }
        Ok((alloc, offset))
    }

    /// Base pointer of the allocation containing `ptr`.
    pub fn allocation_base(&self, ptr: u64) -> Option<u64> {
        let (base, alloc) = self.allocations.range(..=ptr).next_back()?;
        (ptr - base < alloc.size.max(1)).then_some(*base)
    }

    /// Ordinal of the allocation containing `ptr`.
    pub fn ordinal_of(&mut self, ptr: u64) -> Result<u32, SimError> {
        Ok(self.find(ptr, 0)?.0.ordinal)
    }

    /// Copy host bytes into device memory.
    pub fn write(&mut self, ptr: u64, data: &[u8]) -> Result<(), SimError> {
        let (alloc, offset) = self.find(ptr, data.len() as u64)?;
        match &mut alloc.contents {
            Contents::Backed(buf) => {
                ensure_len(buf, alloc.size);
                buf[offset as usize..offset as usize + data.len()].copy_from_slice(data);
                Ok(())
            }
            Contents::Uniform(_) => Err(SimError::Unsupported(format!(
                "writing host data into an allocation over {} bytes",
                BACKED_LIMIT
            ))),
        }
    }

    /// Give up the contents of the large allocation holding `ptr` (a uniform one), which
    /// then reads as zeros: what a driver front end does when a client writes data the
    /// simulator does not keep (PyTorch loading weights into a multi-GiB tensor). Host-backed
    /// allocations keep their contents; `false`: `ptr` is in none of this process's.
    pub fn discard_contents(&mut self, ptr: u64) -> bool {
        match self.find(ptr, 0) {
            Ok((alloc, _)) => {
                if let Contents::Uniform(v) = &mut alloc.contents {
                    *v = 0;
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Copy device memory into host bytes.
    pub fn read(&mut self, ptr: u64, out: &mut [u8]) -> Result<(), SimError> {
        let (alloc, offset) = self.find(ptr, out.len() as u64)?;
        match &mut alloc.contents {
            Contents::Backed(buf) => {
                ensure_len(buf, alloc.size);
                out.copy_from_slice(&buf[offset as usize..offset as usize + out.len()]);
            }
            Contents::Uniform(v) => {
                let word = v.to_le_bytes();
                for (i, b) in out.iter_mut().enumerate() {
                    *b = word[((offset as usize) + i) % 4];
                }
            }
        }
        Ok(())
    }

    /// Set `count` bytes at `ptr` to `value` (cuMemsetD8).
    pub fn memset8(&mut self, ptr: u64, value: u8, count: u64) -> Result<(), SimError> {
        let (alloc, offset) = self.find(ptr, count)?;
        match &mut alloc.contents {
            Contents::Backed(buf) => {
                ensure_len(buf, alloc.size);
                buf[offset as usize..(offset + count) as usize].fill(value);
                Ok(())
            }
            Contents::Uniform(v) if offset == 0 && count == alloc.size => {
                *v = u32::from_le_bytes([value; 4]);
                Ok(())
            }
            Contents::Uniform(_) => Err(SimError::Unsupported(
                "partial memset of a large allocation".into(),
            )),
        }
    }

    /// Set `count` 32-bit words at `ptr` to `value` (cuMemsetD32, and the fill kernel).
    pub fn fill_u32(&mut self, ptr: u64, value: u32, count: u64) -> Result<(), SimError> {
        let (alloc, offset) = self.find(ptr, count.saturating_mul(4))?;
        match &mut alloc.contents {
            Contents::Backed(buf) => {
                ensure_len(buf, alloc.size);
                let bytes = value.to_le_bytes();
                let region = &mut buf[offset as usize..(offset + count * 4) as usize];
                for chunk in region.chunks_exact_mut(4) {
                    chunk.copy_from_slice(&bytes);
                }
                Ok(())
            }
            Contents::Uniform(v) if offset == 0 && count == alloc.size / 4 => {
                *v = value;
                Ok(())
            }
            Contents::Uniform(_) => Err(SimError::Unsupported(
                "partial fill of a large allocation".into(),
            )),
        }
    }

    /// Sum of `count` little-endian 32-bit words at `ptr`, as the checksum kernel computes.
    pub fn checksum_u32(&mut self, ptr: u64, count: u64) -> Result<u64, SimError> {
        let (alloc, offset) = self.find(ptr, count.saturating_mul(4))?;
        match &mut alloc.contents {
            Contents::Backed(buf) => {
                ensure_len(buf, alloc.size);
                let region = &buf[offset as usize..(offset + count * 4) as usize];
                Ok(kernel::checksum(
                    region
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                ))
            }
            Contents::Uniform(v) => Ok(kernel::checksum_uniform(*v, count)),
        }
    }
}

fn ensure_len(buf: &mut Vec<u8>, size: u64) {
    if buf.len() < size as usize {
        buf.resize(size as usize, 0);
    }
}
