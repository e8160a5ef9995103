//! Programmatic dependent launch (PDL, sm_90 and newer) of the decode step's kernels: the
//! streaming DF11 products (`kernels/df11_tc_stream.cu`) and the small kernels between the
//! products (norms, q/k norm + RoPE + cache write, attention and its combine, the activation,
//! the greedy argmax).
//!
//! Why: a decode step is a chain of short kernels; launched with the
//! `PROGRAMMATIC_STREAM_SERIALIZATION` attribute, a kernel's CTAs may start while the kernel
//! before it still runs, once that one has called `griddepcontrol.launch_dependents` (every
//! kernel of the chain does so first: `kernels/llm_common.cuh`). The dependent then waits in
//! `griddepcontrol.wait` until the kernel before has completed and its writes are visible, so
//! the results are the same bits; what overlaps is the launch itself and, for a product, a
//! prologue that reads only its weights (the DF11 kernel's 32 KB escape table per CTA, the first
//! weight stage of every warp). Inside a CUDA graph capture the launch becomes a programmatic
//! edge.
//!
//! The DF11 products' packed buffers are written only at load, which ends with a synchronize.
//! The BF16 twin is launched the ordinary way: its weights may be written by the kernel just
//! before it (a member decoded for the twin, `Df11Group`), and for a BF16 model's settled
//! weights PDL measured no gain (docs/PERFORMANCE.md). Every streaming product still
//! triggers the kernel after it at its start.
//!
//! Used only where it is safe and available: kernels built for compute 9.0 or newer
//! (`CUDA_COMPUTE_CAP`; below it `griddepcontrol` is compiled out), a device of compute
//! capability 9.0 or newer, and a context without cudarc's event tracking (the raw launch below
//! does not record the events cudarc's `LaunchArgs` would; `df11-llm` turns tracking off for
//! its devices), where the caller's options allow it ([`crate::Df11Options::pdl`]; outputs are
//! the same bits either way).

use std::ffi::c_void;
use std::marker::PhantomData;

use candle_core::cuda_backend::cudarc::driver::{
    sys, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DeviceRepr,
    LaunchConfig,
};
use candle_core::cuda_backend::WrapErr;
use candle_core::CudaDevice;

/// Whether the kernels were built with `griddepcontrol` (PTX for compute 9.0 or newer): a
/// kernel built without it would not wait for the one before it.
const KERNELS_WAIT: bool = ptx_cap_at_least_90(env!("DF11_PTX_COMPUTE_CAP"));

/// Whether a `CUDA_COMPUTE_CAP` string as build.rs passes it (`"80"`, `"90"`, `"100"`) is 90 or
/// more.
const fn ptx_cap_at_least_90(cap: &str) -> bool {
    let b = cap.as_bytes();
    let mut value = 0u32;
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            return false;
        }
        value = value * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    value >= 90
}

/// Whether launches on `dev` may use PDL (see the module docs) where the caller wants it
/// (`wanted`: [`crate::Df11Options::pdl`]).
pub fn available(dev: &CudaDevice, wanted: bool) -> candle_core::Result<bool> {
    if !wanted || !KERNELS_WAIT {
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
pub struct RawArgs<'a> {
    stream: &'a CudaStream,
    // Boxed on purpose: `params` points at each address, which must not move as the list grows.
    #[allow(clippy::vec_box)]
    addresses: Vec<Box<sys::CUdeviceptr>>,
    params: Vec<*mut c_void>,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> RawArgs<'a> {
    /// An empty list for a launch on `stream`.
    pub fn new(stream: &'a CudaStream) -> Self {
        Self {
            stream,
            addresses: Vec::new(),
            params: Vec::new(),
            _borrows: PhantomData,
        }
    }

    /// A scalar parameter.
    pub fn scalar<T: DeviceRepr>(&mut self, v: &'a T) -> &mut Self {
        self.params.push(v as *const T as *mut c_void);
        self
    }

    /// A device buffer parameter (its address).
    pub fn buffer<T, B: DevicePtr<T>>(&mut self, b: &'a B) -> &mut Self {
        // Event tracking is off (`available`), so the guard records nothing.
        let (ptr, _guard) = b.device_ptr(self.stream);
        let boxed = Box::new(ptr);
        self.params
            .push(&*boxed as *const sys::CUdeviceptr as *mut c_void);
        self.addresses.push(boxed);
        self
    }
}

/// A kernel argument [`launch_kernel!`] can pass either way: a device buffer (by its address)
/// or a scalar.
pub trait KernelArg {
    /// Appends the argument to `args`.
    fn push_to<'a>(&'a self, args: &mut RawArgs<'a>);
}

impl<T> KernelArg for CudaSlice<T> {
    fn push_to<'a>(&'a self, args: &mut RawArgs<'a>) {
        args.buffer(self);
    }
}

impl<T> KernelArg for CudaView<'_, T> {
    fn push_to<'a>(&'a self, args: &mut RawArgs<'a>) {
        args.buffer(self);
    }
}

impl<T> KernelArg for CudaViewMut<'_, T> {
    fn push_to<'a>(&'a self, args: &mut RawArgs<'a>) {
        args.buffer(self);
    }
}

macro_rules! scalar_kernel_arg {
    ($($t:ty),+) => {$(
        impl KernelArg for $t {
            fn push_to<'a>(&'a self, args: &mut RawArgs<'a>) {
                args.scalar(self);
            }
        }
    )+};
}
scalar_kernel_arg!(i32, u32, i64, u64, f32);

/// Launches `$func` with `$cfg` and the arguments on `$dev`'s stream: a programmatic dependent
/// launch where `$pdl` (the caller's wish) and [`available`], else cudarc's ordinary launch. Evaluates to
/// `candle_core::Result<()>`; unsafe as any launch (the caller's SAFETY note covers both ways),
/// and the kernel must call `griddepcontrol.wait` (`kernels/llm_common.cuh`) before it reads or
/// writes anything another kernel writes.
#[doc(hidden)]
#[macro_export]
macro_rules! __df11_launch_kernel {
    ($dev:expr, $pdl:expr, $func:expr, $cfg:expr; $($arg:expr),+ $(,)?) => {{
        if $crate::cuda::pdl::available(&$dev, $pdl)? {
            let stream = $dev.cuda_stream();
            let mut raw = $crate::cuda::pdl::RawArgs::new(&stream);
            $($crate::cuda::pdl::KernelArg::push_to($arg, &mut raw);)+
            $crate::cuda::pdl::launch(&$func, $cfg, &mut raw)
        } else {
            let mut builder = $func.builder();
            $(builder.arg($arg);)+
            builder.launch($cfg).map(|_| ()).w()
        }
    }};
}
#[doc(inline)]
pub use __df11_launch_kernel as launch_kernel;

/// Launches `func` on the args' stream with the programmatic-stream-serialization attribute.
///
/// # Safety
/// As for any kernel launch: `args` must match the kernel's parameters in number, order and
/// type, and the kernel must read or write nothing the previous kernel on the stream writes
/// before its `griddepcontrol.wait`.
pub unsafe fn launch(
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut RawArgs<'_>,
) -> candle_core::Result<()> {
    // SAFETY: the caller's contract.
    unsafe { launch_maybe(func, cfg, args, true) }
}

/// [`launch`], with the attribute only where `dependent` (else a plain launch of the same
/// arguments).
///
/// # Safety
/// As for [`launch`].
pub unsafe fn launch_maybe(
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut RawArgs<'_>,
    dependent: bool,
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
        numAttrs: u32::from(dependent),
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

#[cfg(test)]
mod tests {
    use super::ptx_cap_at_least_90;

    #[test]
    fn only_compute_90_and_newer_ptx_waits() {
        for (cap, waits) in [
            ("75", false),
            ("80", false),
            ("89", false),
            ("90", true),
            ("100", true),
            ("120", true),
            ("", false),
            ("9x", false),
        ] {
            assert_eq!(ptx_cap_at_least_90(cap), waits, "{cap:?}");
        }
    }
}
