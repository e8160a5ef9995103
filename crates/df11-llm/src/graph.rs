//! A decode step captured as a CUDA graph: captured once per batch size on first use, replayed
//! every step. The graph reads its inputs from static buffers (the embedded tokens, each row's
//! position and cache slot) that the host rewrites before each replay, and leaves the logits in
//! a static buffer; everything the step allocates is allocated and freed inside the graph.
//!
//! Capture follows candle 0.11's rules (its notes, §1.7): hold candle's host-to-device cache
//! guard, run the step once eagerly on the same buffers (module loads, cuBLAS workspaces and
//! candle's small uploads happen there), then capture the same calls.

use candle_core::backend::BackendDevice;
use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::cuda_backend::cudarc::driver::CudaGraph;
use candle_core::cuda_backend::CudaDevice;
use candle_core::{CudaStorage, DType, InplaceOp1, Layout, Tensor};

use crate::error::{LlmError, Result};

/// The captured step of one batch size.
pub struct StepGraph {
    graph: CudaGraph,
    x: Tensor,
    positions: Tensor,
    slots: Tensor,
    logits: Tensor,
}

/// Writes host u32 values into a device tensor in place (outside any capture).
struct Upload<'a>(&'a [u32]);

impl InplaceOp1 for Upload<'_> {
    fn name(&self) -> &'static str {
        "upload-u32"
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("upload-u32 is for CUDA tensors")
    }

    fn cuda_fwd(&self, s: &mut CudaStorage, l: &Layout) -> candle_core::Result<()> {
        use candle_core::backend::BackendStorage;
        use candle_core::cuda_backend::WrapErr;
        if l.shape().elem_count() != self.0.len() || !l.is_contiguous() {
            candle_core::bail!("upload-u32: {} values into {:?}", self.0.len(), l.shape());
        }
        let stream = s.device().cuda_stream();
        let start = l.start_offset();
        let dst = s.as_cuda_slice_mut::<u32>()?;
        let mut view = dst.slice_mut(start..start + self.0.len());
        stream.memcpy_htod(self.0, &mut view).w()
    }
}

fn u32s(v: &[usize]) -> Vec<u32> {
    v.iter().map(|&x| x as u32).collect()
}

fn driver(e: impl std::fmt::Debug) -> LlmError {
    LlmError::Usage(format!("CUDA graph: {e:?}"))
}

impl StepGraph {
    /// Captures `body` (embedded tokens `[rows, 1, hidden]`, positions, slots → logits `[rows,
    /// vocab]`) for the shapes of `x`, with `positions`/`slots` as the first step's inputs, and
    /// runs that first step. `body` must run the same launches on every call.
    pub fn capture(
        dev: &CudaDevice,
        x: &Tensor,
        positions: &[usize],
        slots: &[usize],
        body: &dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<(Self, Tensor)> {
        let rows = positions.len();
        let device = x.device();
        let static_x = Tensor::zeros(x.dims(), x.dtype(), device)?;
        let static_positions = Tensor::zeros(rows, DType::U32, device)?;
        let static_slots = Tensor::zeros(rows, DType::U32, device)?;
        let write_inputs = |x: &Tensor| -> Result<()> {
            static_x.slice_set(x, 0, 0)?;
            static_positions.inplace_op1(&Upload(&u32s(positions)))?;
            static_slots.inplace_op1(&Upload(&u32s(slots)))?;
            Ok(())
        };
        write_inputs(x)?;
        let stream = dev.cuda_stream();
        let (graph, logits) = {
            let _cache = dev.enable_cuda_graph_htod_cache();
            // The warm-up: every lazy allocation and upload happens here, not under capture.
            let warm = body(&static_x, &static_positions, &static_slots)?;
            let logits = Tensor::zeros(warm.dims(), warm.dtype(), device)?;
            logits.slice_set(&warm, 0, 0)?;
            drop(warm);
            dev.synchronize()?;
            stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(driver)?;
            let captured = (|| -> Result<()> {
                let out = body(&static_x, &static_positions, &static_slots)?;
                logits.slice_set(&out, 0, 0)?;
                Ok(())
            })();
            // End the capture even when the body failed, so the stream is usable again.
            let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
            captured?;
            let graph = graph
                .map_err(driver)?
                .ok_or_else(|| driver("the capture recorded nothing"))?;
            (graph, logits)
        };
        let step = Self {
            graph,
            x: static_x,
            positions: static_positions,
            slots: static_slots,
            logits,
        };
        // The warm-up updated x in place: write the inputs again, then run the graph.
        let out = step.replay(x, positions, slots)?;
        Ok((step, out))
    }

    /// Rows of the captured step.
    pub fn rows(&self) -> usize {
        self.positions.elem_count()
    }

    /// Writes the inputs, replays the graph, returns a copy of the logits.
    pub fn replay(&self, x: &Tensor, positions: &[usize], slots: &[usize]) -> Result<Tensor> {
        if x.dims() != self.x.dims() || positions.len() != self.rows() {
            return Err(LlmError::Usage(format!(
                "a step of {:?} for a graph captured for {:?}",
                x.dims(),
                self.x.dims()
            )));
        }
        self.x.slice_set(&x.contiguous()?, 0, 0)?;
        self.positions.inplace_op1(&Upload(&u32s(positions)))?;
        self.slots.inplace_op1(&Upload(&u32s(slots)))?;
        self.graph.launch().map_err(driver)?;
        Ok(self.logits.copy()?)
    }
}
