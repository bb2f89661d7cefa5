//! GPU memory for the perf tools (`write-bw --use-cuda[=GPU]`, perftest's `--use_cuda`): a
//! side's target region and source buffers in CUDA memory, registered through dma-bufs.
//!
//! Owns: [`Target`] (the region the peer targets: a host [`Mr`] or a [`GpuMr`]) and
//! [`Sources`] (the buffers a side posts from: a host [`MemoryPool`] or a [`GpuPool`]), each
//! with the few calls the engine makes on them, and [`open`] (the GPU of `--use-cuda`).
//! Must not: call CUDA except through `bypass-gpu`, or change how the engine posts and
//! times (`flows`, `bw`).
//!
//! GPU buffers hold no CPU slice: a source's pattern or tag is copied in with
//! `cuMemcpyHtoD`, the target's bytes read with the MR's copies (through the `CudaPeer`).
//! As perftest (`src/perftest_parameters.c`, `parser`'s CUDA checks), CUDA is for the
//! bandwidth tools here, and never with inline messages. Sources: perftest
//! `src/cuda_memory.c`, `src/perftest_resources.c` (`create_single_mr`).

use bypass_gpu::{Gpu, GpuMr, GpuPool};
use bypass_verbs::driver::mr::MkeyAccess;
use bypass_verbs::wr::LocalBuf;
use bypass_verbs::{MemoryPool, Mr, Pd, RemoteBuffer, VerbsError};

use super::PerfError;
use super::ops::fill;

/// The region a side's peer targets.
pub enum Target {
    /// Host memory.
    Host(Mr),
    /// GPU memory (boxed: it holds the MR, the export and the buffer).
    Gpu(Box<GpuMr>),
}

impl Target {
    /// Registers `len` bytes with `access`: on `gpu` when given, else host memory.
    pub fn register(
        pd: &Pd,
        gpu: Option<&Gpu>,
        len: usize,
        access: MkeyAccess,
    ) -> Result<Self, PerfError> {
        Ok(match gpu {
            Some(g) => Self::Gpu(Box::new(g.alloc_mr(pd, len, access, false)?)),
            None => Self::Host(pd.register(len, access)?),
        })
    }

    /// What the peer targets.
    pub fn remote(&self) -> RemoteBuffer {
        match self {
            Self::Host(m) => m.remote(),
            Self::Gpu(g) => g.mr.remote(),
        }
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        match self {
            Self::Host(m) => m.len(),
            Self::Gpu(g) => g.mr.len(),
        }
    }

    /// Copies `dst.len()` bytes at `offset` out.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        match self {
            Self::Host(m) => m.read(offset, dst),
            Self::Gpu(g) => g.mr.read(offset, dst),
        }
    }

    /// Copies `src` in at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        match self {
            Self::Host(m) => m.write(offset, src),
            Self::Gpu(g) => g.mr.write(offset, src),
        }
    }

    /// The big-endian u64 at `offset` (an atomic's target).
    pub fn read_u64_be(&self, offset: usize) -> Result<u64, VerbsError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Writes `v` big-endian at `offset`.
    #[allow(dead_code)] // the engine tests set atomics' targets with it
    pub fn write_u64_be(&self, offset: usize, v: u64) -> Result<(), VerbsError> {
        self.write(offset, &v.to_be_bytes())
    }
}

/// The buffers a side posts from (and READs and atomics land in).
pub enum Sources {
    /// Host memory.
    Host(MemoryPool),
    /// GPU memory.
    Gpu(GpuPool),
}

impl Sources {
    /// `count` chunks of `chunk` bytes: on `gpu` when given, else host memory.
    pub fn new(pd: &Pd, gpu: Option<&Gpu>, chunk: usize, count: usize) -> Result<Self, PerfError> {
        Ok(match gpu {
            Some(g) => Self::Gpu(GpuPool::new(g, pd, chunk, count, false)?),
            None => Self::Host(pd.create_pool(chunk, count)?),
        })
    }

    /// The host pool (the frozen shared source and the tools' host paths), if host memory.
    pub fn host(&self) -> Option<&MemoryPool> {
        match self {
            Self::Host(p) => Some(p),
            Self::Gpu(_) => None,
        }
    }

    /// A buffer of `size` bytes, holding message `k`'s pattern when `pattern` and ending in
    /// `tag` when given (else whatever the chunk holds, as perftest posts its buffer).
    pub fn lease(
        &self,
        size: usize,
        pattern: Option<u64>,
        tag: Option<u8>,
    ) -> Result<LocalBuf, PerfError> {
        match self {
            Self::Host(p) => {
                let mut l = p.lease(size)?;
                if let Some(k) = pattern {
                    fill(l.as_mut_slice(), k);
                }
                if let (Some(t), Some(last)) = (tag, l.as_mut_slice().last_mut()) {
                    *last = t;
                }
                Ok(l.into())
            }
            Self::Gpu(p) => {
                let l = p.lease(size)?;
                let at = (l.iova() - p.buffer().dptr()) as usize;
                if let Some(k) = pattern {
                    let mut bytes = vec![0u8; size];
                    fill(&mut bytes, k);
                    p.buffer().copy_from_host(at, &bytes)?;
                }
                if let (Some(t), true) = (tag, size > 0) {
                    p.buffer().copy_from_host(at + size - 1, &[t])?;
                }
                Ok(l.into())
            }
        }
    }
}

/// Opens `--use-cuda`'s GPU.
///
/// Errors: [`PerfError::Gpu`] with the typed reason (no libcuda, `CUDA_ERROR_NO_DEVICE`,
/// no such ordinal).
pub fn open(ordinal: Option<u32>) -> Result<Option<Gpu>, PerfError> {
    ordinal
        .map(|o| Gpu::open(o as usize).map_err(|e| PerfError::Gpu(e.into())))
        .transpose()
}
