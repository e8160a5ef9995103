//! Programmatic dependent launch (PDL, sm_90 and newer) for the streaming DF11 tensor-core
//! products (not their BF16 twin, whose weights may be written by the kernel just before it:
//! a member decoded for the twin; the packed DF11 buffers are written only at load, which ends
//! with a synchronize).
//!
//! Why: a decode step is a chain of short kernels, and each product starts with a prologue that
//! reads only its weights (the DF11 kernel's 32 KB escape table per CTA, the first weight stages
//! of every warp: `kernels/df11_tc_stream.cu`). Launched with the
//! `PROGRAMMATIC_STREAM_SERIALIZATION` attribute, a product's CTAs may start while the kernel
//! before it (a norm, the attention's combine, the activation: they call
//! `griddepcontrol.launch_dependents` first, `kernels/llm_common.cuh`) still runs; the product
//! waits in `griddepcontrol.wait` before it reads x or writes anything, so the result is the
//! same bits. Inside a CUDA graph capture the launch becomes a programmatic edge.
//!
//! Used only where it is safe and available: compute capability 9.0 or newer, and the device's
//! context without cudarc's event tracking (the raw launch below does not record the events
//! cudarc's `LaunchArgs` would; `df11-llm` turns tracking off for its devices). `DF11_PDL=off`
//! (or [`set_pdl`]) turns it off: outputs are the same bits either way.

use std::ffi::c_void;
use std::marker::PhantomData;

use candle_core::cuda_backend::cudarc::driver::{
    sys, CudaFunction, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
};
use candle_core::cuda_backend::WrapErr;
use candle_core::CudaDevice;

use crate::cuda::setting::Setting;

/// `DF11_PDL` (`on`, the default, or `off`): whether the streaming DF11 products use
/// programmatic dependent launches where they can.
static PDL: Setting<bool> =
    Setting::new("DF11_PDL", "PDL setting", &[("on", true), ("off", false)]);

/// Turns programmatic dependent launches of the streaming DF11 products on or off (overrides
/// `DF11_PDL`; outputs are the same bits either way).
pub fn set_pdl(on: bool) {
    PDL.set(on);
}

/// Whether launches on `dev` may use PDL (see the module docs).
pub(crate) fn available(dev: &CudaDevice) -> candle_core::Result<bool> {
    if !PDL.get() {
        return Ok(false);
    }
    let ctx = dev.cuda_stream().context().clone();
    if ctx.is_event_tracking() {
        return Ok(false);
    }
    let major = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .w()?;
    Ok(major >= 9)
}

/// A kernel's parameters for [`launch`]: pointers to the values, in the kernel's order. Device
/// buffers are held as their device addresses (boxed, so the pointers stay put while the list
/// grows); scalars are borrowed for the launch's lifetime.
pub(crate) struct RawArgs<'a> {
    stream: &'a CudaStream,
    // Boxed on purpose: `params` points at each address, which must not move as the list grows.
    #[allow(clippy::vec_box)]
    addresses: Vec<Box<sys::CUdeviceptr>>,
    params: Vec<*mut c_void>,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> RawArgs<'a> {
    /// An empty list for a launch on `stream`.
    pub(crate) fn new(stream: &'a CudaStream) -> Self {
        Self {
            stream,
            addresses: Vec::new(),
            params: Vec::new(),
            _borrows: PhantomData,
        }
    }

    /// A scalar parameter.
    pub(crate) fn scalar<T: DeviceRepr>(&mut self, v: &'a T) -> &mut Self {
        self.params.push(v as *const T as *mut c_void);
        self
    }

    /// A device buffer parameter (its address).
    pub(crate) fn buffer<T, B: DevicePtr<T>>(&mut self, b: &'a B) -> &mut Self {
        // Event tracking is off (`available`), so the guard records nothing.
        let (ptr, _guard) = b.device_ptr(self.stream);
        let boxed = Box::new(ptr);
        self.params
            .push(&*boxed as *const sys::CUdeviceptr as *mut c_void);
        self.addresses.push(boxed);
        self
    }
}

/// Launches `func` on the args' stream with the programmatic-stream-serialization attribute.
///
/// # Safety
/// As for any kernel launch: `args` must match the kernel's parameters in number, order and
/// type, and the kernel must read or write nothing the previous kernel on the stream writes
/// before its `griddepcontrol.wait`.
pub(crate) unsafe fn launch(
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut RawArgs<'_>,
) -> candle_core::Result<()> {
    args.stream.context().bind_to_thread().w()?;
    // SAFETY: a zeroed attribute is a valid "no attribute" value; the union field set is the
    // one the attribute id names.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: args.stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: the caller's contract; `params` point at live values for the call's duration.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            func.cu_function(),
            args.params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
        .result()
        .w()
    }
}
