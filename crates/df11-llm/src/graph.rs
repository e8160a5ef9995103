//! A decode step captured as a CUDA graph: captured once per batch size on first use (on a
//! model split over devices, once per segment: a graph runs on one device), replayed every step.
//! The graph reads its inputs from static buffers (the embedded tokens or the residual stream
//! of the previous segment, each row's position and cache slot) that the host rewrites before
//! each replay, and leaves its outputs (logits, or the residual stream for the next segment) in
//! static buffers; everything the step allocates is allocated and freed inside the graph.
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

/// The captured step of one batch size (on a model split over devices: of one segment).
pub struct StepGraph {
    graph: CudaGraph,
    inputs: Vec<Tensor>,
    positions: Tensor,
    slots: Tensor,
    outputs: Vec<Tensor>,
}

/// What a captured step runs: input tensors (the embedded tokens, or the residual stream and
/// the pending layer output a previous segment left), positions, slots → output tensors.
pub type StepBody<'a> = dyn Fn(&[Tensor], &Tensor, &Tensor) -> Result<Vec<Tensor>> + 'a;

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
    /// Captures `body` for the shapes of `inputs`, with `positions`/`slots` as the first step's
    /// rows, and runs that first step (returning its outputs). `body` must run the same launches
    /// on every call and must not write to its inputs.
    pub fn capture(
        dev: &CudaDevice,
        inputs: &[Tensor],
        positions: &[usize],
        slots: &[usize],
        body: &StepBody<'_>,
    ) -> Result<(Self, Vec<Tensor>)> {
        let rows = positions.len();
        let device = candle_core::Device::Cuda(dev.clone());
        let static_inputs = inputs
            .iter()
            .map(|x| Ok(Tensor::zeros(x.dims(), x.dtype(), &device)?))
            .collect::<Result<Vec<_>>>()?;
        let static_positions = Tensor::zeros(rows, DType::U32, &device)?;
        let static_slots = Tensor::zeros(rows, DType::U32, &device)?;
        for (s, x) in static_inputs.iter().zip(inputs) {
            s.slice_set(&x.contiguous()?, 0, 0)?;
        }
        static_positions.inplace_op1(&Upload(&u32s(positions)))?;
        static_slots.inplace_op1(&Upload(&u32s(slots)))?;
        let stream = dev.cuda_stream();
        let (graph, outputs) = {
            let _cache = dev.enable_cuda_graph_htod_cache();
            // The warm-up: every lazy allocation and upload happens here, not under capture.
            let warm = body(&static_inputs, &static_positions, &static_slots)?;
            let outputs = warm
                .iter()
                .map(|w| {
                    let o = Tensor::zeros(w.dims(), w.dtype(), &device)?;
                    o.slice_set(w, 0, 0)?;
                    Ok(o)
                })
                .collect::<Result<Vec<_>>>()?;
            drop(warm);
            dev.synchronize()?;
            stream.context().bind_to_thread().map_err(driver)?;
            stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(driver)?;
            let captured = (|| -> Result<()> {
                let out = body(&static_inputs, &static_positions, &static_slots)?;
                for (o, w) in outputs.iter().zip(&out) {
                    o.slice_set(w, 0, 0)?;
                }
                Ok(())
            })();
            // End the capture even when the body failed, so the stream is usable again.
            let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
            captured?;
            let graph = graph
                .map_err(driver)?
                .ok_or_else(|| driver("the capture recorded nothing"))?;
            (graph, outputs)
        };
        let step = Self {
            graph,
            inputs: static_inputs,
            positions: static_positions,
            slots: static_slots,
            outputs,
        };
        let out = step.replay(inputs, positions, slots)?;
        Ok((step, out))
    }

    /// Rows of the captured step.
    pub fn rows(&self) -> usize {
        self.positions.elem_count()
    }

    /// Writes the inputs, replays the graph, returns copies of the outputs.
    pub fn replay(
        &self,
        inputs: &[Tensor],
        positions: &[usize],
        slots: &[usize],
    ) -> Result<Vec<Tensor>> {
        let shapes_match = inputs.len() == self.inputs.len()
            && inputs
                .iter()
                .zip(&self.inputs)
                .all(|(x, s)| x.dims() == s.dims());
        if !shapes_match || positions.len() != self.rows() || slots.len() != self.rows() {
            return Err(LlmError::Usage(format!(
                "a step of {:?} for a graph captured for {:?}",
                inputs.iter().map(|x| x.dims().to_vec()).collect::<Vec<_>>(),
                self.inputs
                    .iter()
                    .map(|x| x.dims().to_vec())
                    .collect::<Vec<_>>()
            )));
        }
        for (s, x) in self.inputs.iter().zip(inputs) {
            s.slice_set(&x.contiguous()?, 0, 0)?;
        }
        self.positions.inplace_op1(&Upload(&u32s(positions)))?;
        self.slots.inplace_op1(&Upload(&u32s(slots)))?;
        self.graph.launch().map_err(driver)?;
        Ok(self
            .outputs
            .iter()
            .map(Tensor::copy)
            .collect::<candle_core::Result<Vec<_>>>()?)
    }
}
