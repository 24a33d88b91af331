//! Device tensors: a spec plus a buffer on one chip. Cloning shares the buffer; the buffer is
//! freed when the last clone drops or on `deallocate`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::host::{decode_pages, encode_pages, HostTensor};
use super::spec::{DataType, Layout, MemoryConfig, TensorPages, TensorSpec};
use crate::allocator::Allocation;
use crate::device::{Chip, CqId, PendingRead};
use crate::error::{ChipError, Result};

static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(1);

struct TensorInner {
    id: u64,
    spec: TensorSpec,
    chip: Arc<Chip>,
    alloc: Mutex<Option<Allocation>>,
}

impl Drop for TensorInner {
    fn drop(&mut self) {
        if let Some(a) = self.alloc.get_mut().take() {
            let _ = self.chip.deallocate(&a);
        }
    }
}

#[derive(Clone)]
pub struct Tensor {
    inner: Arc<TensorInner>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name())
    }
}

/// Whether a host call waits for the device (TT-NN's `blocking`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Blocking {
    #[default]
    Yes,
    No,
}

/// `true` is `Blocking::Yes`, as in TT-NN's `blocking=True`.
impl From<bool> for Blocking {
    fn from(blocking: bool) -> Blocking {
        if blocking {
            Blocking::Yes
        } else {
            Blocking::No
        }
    }
}

/// TT-NN's `allocate_tensor_on_device`: a tensor of `spec` on `chip` whose contents are
/// whatever the memory holds.
pub fn allocate_tensor_on_device(spec: &TensorSpec, chip: &Arc<Chip>) -> Result<Tensor> {
    Tensor::allocate(chip, spec.clone())
}

/// TT-NN's `copy_host_to_device_tensor`: writes `host` into `tensor` through `cq`.
pub fn copy_host_to_device_tensor(host: &HostTensor, tensor: &Tensor, cq: CqId) -> Result<()> {
    tensor.copy_from_host(host, cq)
}

impl Tensor {
    /// [`allocate_tensor_on_device`], taking the spec by value.
    pub fn allocate(chip: &Arc<Chip>, spec: TensorSpec) -> Result<Tensor> {
        let req = spec
            .allocation_request(chip.arch())
            .map_err(|e| rename(e, &spec))?;
        let alloc = chip.allocate(&req)?;
        Ok(Tensor {
            inner: Arc::new(TensorInner {
                id: NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed),
                spec,
                chip: chip.clone(),
                alloc: Mutex::new(Some(alloc)),
            }),
        })
    }

    /// Host tensor to device: allocate, then write through `cq`.
    pub fn from_host(
        host: &HostTensor,
        chip: &Arc<Chip>,
        layout: Layout,
        memory_config: MemoryConfig,
        cq: CqId,
    ) -> Result<Tensor> {
        let spec = TensorSpec::new(host.shape.clone(), host.dtype, layout, memory_config);
        let t = Tensor::allocate(chip, spec)?;
        t.copy_from_host(host, cq)?;
        Ok(t)
    }

    pub fn id(&self) -> u64 {
        self.inner.id
    }
    pub fn spec(&self) -> &TensorSpec {
        &self.inner.spec
    }
    pub fn shape(&self) -> &[usize] {
        &self.inner.spec.shape
    }
    pub fn dtype(&self) -> DataType {
        self.inner.spec.dtype
    }
    pub fn chip(&self) -> &Arc<Chip> {
        &self.inner.chip
    }
    pub fn is_allocated(&self) -> bool {
        self.inner.alloc.lock().is_some()
    }
    /// How errors name this tensor.
    pub fn name(&self) -> String {
        format!(
            "tensor #{} {} on chip {}",
            self.inner.id,
            self.inner.spec,
            self.inner.chip.id()
        )
    }

    /// The live allocation, or an error naming the tensor and what was attempted.
    pub fn allocation(&self, action: &'static str) -> Result<Allocation> {
        self.inner
            .alloc
            .lock()
            .clone()
            .ok_or_else(|| ChipError::Deallocated {
                tensor: self.name(),
                action,
            })
    }

    /// Address and buffer id of the live allocation, without cloning it (the dispatch path).
    pub(crate) fn buffer(&self, action: &'static str) -> Result<(u64, u64)> {
        match self.inner.alloc.lock().as_ref() {
            Some(a) => Ok((a.address, a.id)),
            None => Err(ChipError::Deallocated {
                tensor: self.name(),
                action,
            }),
        }
    }

    pub fn buffer_address(&self) -> Result<u64> {
        Ok(self.allocation("addressed")?.address)
    }

    /// Frees the buffer. Without `force` it only does so when this is the last handle (TT-NN's
    /// rule for shared storage); with `force` every handle sees a deallocated tensor.
    pub fn deallocate(&self, force: bool) -> Result<()> {
        if !force && Arc::strong_count(&self.inner) > 1 {
            return Ok(());
        }
        let alloc = self.inner.alloc.lock().take();
        match alloc {
            Some(a) => self.inner.chip.deallocate(&a),
            None => Err(ChipError::Deallocated {
                tensor: self.name(),
                action: "deallocated again (double free)",
            }),
        }
    }

    pub fn pages(&self) -> Result<TensorPages> {
        let a = self.allocation("used")?;
        self.inner.spec.page_map(self.inner.chip.arch(), a.address)
    }

    fn locations(&self) -> Result<(TensorPages, Vec<(u32, u32)>)> {
        let pages = self.pages()?;
        let locs = (0..pages.map.num_pages).map(|p| {
            let (b, a) = pages.location(p);
            (b, a as u32)
        });
        let locs = locs.collect();
        Ok((pages, locs))
    }

    /// [`copy_host_to_device_tensor`] as a method (the same name as on a mesh tensor).
    pub fn copy_from_host(&self, host: &HostTensor, cq: CqId) -> Result<()> {
        let bytes = self.encode_host(host)?;
        self.copy_encoded_from_host(&bytes, cq)
    }

    /// `host`'s values as this tensor's page bytes (what [`Tensor::copy_from_host`] writes),
    /// checked against its shape and dtype. Tensors of one spec (a mesh's chips) take the same
    /// bytes: a replicated host tensor is encoded once, not once per chip.
    pub fn encode_host(&self, host: &HostTensor) -> Result<Vec<u8>> {
        let spec = &self.inner.spec;
        if host.shape != spec.shape || host.dtype != spec.dtype {
            return Err(ChipError::ShapeMismatch {
                op: "copy_host_to_device_tensor".into(),
                detail: format!(
                    "host tensor {:?} {} does not match {}; create the host tensor with the device tensor's shape and dtype",
                    host.shape,
                    host.dtype,
                    self.name()
                ),
            });
        }
        encode_pages(spec, &host.data)
    }

    /// Writes page bytes from [`Tensor::encode_host`] (of a tensor with this spec) through
    /// `cq`.
    pub fn copy_encoded_from_host(&self, bytes: &[u8], cq: CqId) -> Result<()> {
        let (pages, locs) = self.locations()?;
        let want = locs.len() * pages.map.page_size as usize;
        if bytes.len() != want {
            return Err(ChipError::Data(format!(
                "{} page bytes for {}, which takes {want}; encode them with this tensor's encode_host",
                bytes.len(),
                self.name()
            )));
        }
        self.inner.chip.enqueue_write_pages(
            cq,
            pages.map.space,
            pages.map.page_size as u32,
            &locs,
            bytes,
        )
    }

    /// The older name of [`Tensor::copy_from_host`].
    #[doc(hidden)]
    pub fn write_from_host(&self, host: &HostTensor, cq: CqId) -> Result<()> {
        self.copy_from_host(host, cq)
    }

    /// Reads the tensor back. `Blocking::No` returns a pending read: its data is valid once the
    /// queue reaches it (after a synchronize, or `wait`).
    pub fn to_host_async(&self, cq: CqId) -> Result<PendingTensorRead> {
        let (pages, locs) = self.locations()?;
        let read = self.inner.chip.enqueue_read_pages(
            cq,
            pages.map.space,
            pages.map.page_size as u32,
            &locs,
        )?;
        Ok(PendingTensorRead {
            read,
            spec: self.inner.spec.clone(),
        })
    }

    pub fn to_host(&self, cq: CqId) -> Result<HostTensor> {
        self.to_host_async(cq)?.wait()
    }
}

pub struct PendingTensorRead {
    read: PendingRead,
    spec: TensorSpec,
}

impl PendingTensorRead {
    pub fn wait(self) -> Result<HostTensor> {
        let bytes = self.read.wait()?;
        let data = decode_pages(&self.spec, &bytes)?;
        Ok(HostTensor {
            shape: self.spec.shape.clone(),
            dtype: self.spec.dtype,
            data,
        })
    }
    pub fn is_ready(&self) -> bool {
        self.read.is_ready()
    }
}

fn rename(e: ChipError, spec: &TensorSpec) -> ChipError {
    match e {
        ChipError::InvalidShardSpec { reason, .. } => ChipError::InvalidShardSpec {
            tensor: format!("tensor {spec}"),
            reason,
        },
        other => other,
    }
}
