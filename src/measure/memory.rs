//! The memory a transfer test moves, host or GPU, behind one interface shared by `gdr.loopback` and `pair`:
//! allocate, fill, give the region to register (`rc::Port::register`: DMA-BUF first where an fd was exported,
//! then `ibv_reg_mr`, which on a GPU pointer is the peermem path), read back to verify. The CPU cannot touch
//! GPU memory, so filling and reading go through a pinned staging copy.

use serde::{Deserialize, Serialize};

use crate::dynlib::cuda::{self, DeviceBuffer, DeviceContext, PinnedHostBuffer};
use crate::dynlib::cuda_dmabuf::{self, DmabufFd};
use crate::dynlib::nvml::normalize_bus_id;
use crate::measure::rc::{fail, Failure, Region};

/// Which memory `pair` moves (`--memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum MemoryChoice {
    /// GPU memory where the NVIDIA driver lists GPUs (judged by the presence rule), host memory always.
    Auto,
    /// Host memory only.
    Host,
    /// GPU memory required; the GPUs are the ones CUDA lists.
    Gpu,
}

pub enum TestMemory {
    Host(Vec<u8>),
    Gpu(Box<GpuMemory>),
}

/// GPU memory with its staging copy. Fields drop in order: the DMA-BUF fd and the buffers before the context
/// they belong to.
pub struct GpuMemory {
    /// Why no DMA-BUF fd was exported (`cuMemGetHandleForAddressRange`'s answer), if so.
    export_refused: Option<String>,
    dmabuf: Option<DmabufFd>,
    dev: DeviceBuffer,
    staging: PinnedHostBuffer,
    _ctx: DeviceContext,
}

/// The stage of a failed CUDA call on the test memory.
pub const CUDA: &str = "CUDA";

fn cuda_failure(e: impl std::fmt::Display) -> Failure {
    fail(CUDA, e.to_string())
}

impl TestMemory {
    /// `len` zeroed bytes of ordinary host memory.
    pub fn host(len: usize) -> TestMemory {
        TestMemory::Host(vec![0; len])
    }

    /// `len` zeroed bytes on the GPU at `bus_id`, exported as a DMA-BUF where the driver allows.
    pub fn gpu(bus_id: &str, len: usize) -> Result<TestMemory, Failure> {
        let ctx =
            DeviceContext::new(gpu_ordinal(bus_id).map_err(cuda_failure)?).map_err(cuda_failure)?;
        let dev = DeviceBuffer::alloc(len).map_err(cuda_failure)?;
        let mut staging = PinnedHostBuffer::alloc(len).map_err(cuda_failure)?;
        staging.as_mut_slice().fill(0);
        cuda::copy_htod(&dev, &staging).map_err(cuda_failure)?;
        let (dmabuf, export_refused) = match cuda_dmabuf::export(&dev) {
            Ok(fd) => (Some(fd), None),
            Err(e) => (None, Some(format!("DMA-BUF export = {e}"))),
        };
        Ok(TestMemory::Gpu(Box::new(GpuMemory {
            export_refused,
            dmabuf,
            dev,
            staging,
            _ctx: ctx,
        })))
    }

    /// What to register (`&mut`: the NIC and the caller's checks write through the address).
    pub fn region(&mut self) -> Region {
        match self {
            TestMemory::Host(buf) => Region {
                addr: buf.as_mut_ptr() as u64,
                len: buf.len(),
                dmabuf_fd: None,
                host_visible: true,
            },
            TestMemory::Gpu(g) => Region {
                addr: g.dev.ptr(),
                len: g.dev.len(),
                dmabuf_fd: g.dmabuf.as_ref().map(DmabufFd::raw),
                host_visible: false,
            },
        }
    }

    /// Registration paths refused before `ibv_*_mr` was called (a GPU whose driver exports no DMA-BUF).
    pub fn refused(&self) -> Vec<String> {
        match self {
            TestMemory::Gpu(g) => g.export_refused.iter().cloned().collect(),
            TestMemory::Host(_) => Vec::new(),
        }
    }

    /// Changes the contents through `edit`, which sees the whole current contents. No transfer may be in
    /// flight.
    pub fn fill(&mut self, edit: impl FnOnce(&mut [u8])) -> Result<(), Failure> {
        match self {
            TestMemory::Host(buf) => {
                edit(buf);
                Ok(())
            }
            TestMemory::Gpu(g) => {
                cuda::copy_dtoh(&mut g.staging, &g.dev).map_err(cuda_failure)?;
                edit(g.staging.as_mut_slice());
                cuda::copy_htod(&g.dev, &g.staging).map_err(cuda_failure)
            }
        }
    }

    /// The current contents (GPU memory: copied back first). No transfer may be in flight.
    pub fn read_back(&mut self) -> Result<&[u8], Failure> {
        match self {
            TestMemory::Host(buf) => Ok(buf),
            TestMemory::Gpu(g) => {
                cuda::copy_dtoh(&mut g.staging, &g.dev).map_err(cuda_failure)?;
                Ok(g.staging.as_slice())
            }
        }
    }
}

/// The GPUs CUDA lists, by ordinal, as sysfs bus ids.
pub fn cuda_gpus() -> Result<Vec<String>, crate::dynlib::LibError> {
    cuda::load()?;
    (0..cuda::device_count()?)
        .map(|i| Ok(normalize_bus_id(&cuda::Device::get(i)?.pci_bus_id()?)))
        .collect()
}

/// The CUDA ordinal of the GPU at `bdf` (CUDA numbers GPUs its own way). Looked up here, per allocation, rather
/// than passed in: `gdr.loopback`'s GPUs come from the driver's listing, whose order is not CUDA's, and `pair`
/// measures in a child process that would have to carry it beside the bus id; listing costs a few driver calls.
fn gpu_ordinal(bdf: &str) -> Result<usize, String> {
    let gpus = cuda_gpus().map_err(|e| e.to_string())?;
    gpus.iter()
        .position(|g| *g == normalize_bus_id(bdf))
        .ok_or_else(|| format!("no CUDA device has PCI bus id {bdf}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_compare_in_sysfs_form() {
        assert_eq!(normalize_bus_id("00000000:17:00.0"), "0000:17:00.0");
        assert_eq!(normalize_bus_id("0000:5E:00.0"), "0000:5e:00.0");
        assert_eq!(normalize_bus_id("garbage"), "garbage");
    }

    /// GPU memory through tests/vm/cuda-standin.c: allocation, fill and read back through the staging copy,
    /// the region (no DMA-BUF: the stand-in answers CUDA_ERROR_NOT_SUPPORTED, as the proprietary module does),
    /// and that refusal named. The loader reads LD_LIBRARY_PATH at start, so the test runs itself again with it.
    #[test]
    fn gpu_memory_through_the_cuda_standin() {
        if std::env::var_os("FABRIC_PREFLIGHT_STANDIN_CHILD").is_some() {
            let mut m = TestMemory::gpu("0000:5e:00.0", 4096).unwrap();
            m.fill(|b| b[..3].copy_from_slice(&[7, 8, 9])).unwrap();
            m.fill(|b| b[4095] = 1).unwrap();
            let back = m.read_back().unwrap();
            assert_eq!((&back[..4], back[4095]), (&[7, 8, 9, 0][..], 1));
            let r = m.region();
            assert!(!r.host_visible && r.dmabuf_fd.is_none() && r.len == 4096);
            let refused = m.refused();
            assert!(
                refused.len() == 1 && refused[0].contains("CUDA_ERROR_NOT_SUPPORTED"),
                "{refused:?}"
            );
            assert!(TestMemory::gpu("0000:17:00.0", 4096).is_err());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cc = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(dir.path().join("libcuda.so.1"))
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/vm/cuda-standin.c"
            ))
            .status()
            .expect("the CUDA stand-in needs a C compiler (cc)");
        assert!(cc.success());
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "measure::memory::tests::gpu_memory_through_the_cuda_standin",
            ])
            .env("LD_LIBRARY_PATH", dir.path())
            .env("FABRIC_PREFLIGHT_STANDIN_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn host_memory_fills_and_reads_back() {
        let mut m = TestMemory::host(8);
        m.fill(|b| b[..4].copy_from_slice(&[1, 2, 3, 4])).unwrap();
        assert_eq!(m.read_back().unwrap(), &[1, 2, 3, 4, 0, 0, 0, 0]);
        let r = m.region();
        assert!(r.host_visible && r.dmabuf_fd.is_none() && r.len == 8);
        assert!(m.refused().is_empty());
    }
}
