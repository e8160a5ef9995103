//! What every launch of the GEMV-family kernels (`df11_fused.cu`: fused Huffman and packed, and
//! the BF16 twin) shares: the grid for a kernel's resident CTAs, the tiling of a matrix into
//! chunk items (which fixes the summation order), the row batching, and the argument checks
//! made before any launch; and what every launch in `cuda/` shares: the CUDA-only op wrapper
//! ([`CudaOp1`], [`CudaOp2`], `cuda_only_op!`) and `push_args!`.

use candle_core::cuda_backend::cudarc::driver::sys::{
    CUdevice_attribute, CUfunction_attribute_enum,
};
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CpuStorage, CudaStorage, Layout, Shape, Tensor};
use half::bf16;

use crate::cuda::limits::FUSED_LIMIT_ROWS;
use crate::cuda::module::{fatbin_module, Module};

/// What a CUDA op returns: its output and the output's shape.
pub type CudaOut = candle_core::Result<(CudaStorage, Shape)>;

/// A custom op of one tensor that runs on CUDA only; `cuda_only_op!(CustomOp1 for T)` makes it
/// candle's `CustomOp1` (a `CustomOp1` cannot be implemented for every such `T` at once: the
/// orphan rule).
pub trait CudaOp1 {
    /// candle's name of the op.
    const NAME: &'static str;
    /// What the op is called in its refusal on the CPU: "{WHAT} runs on CUDA only".
    const WHAT: &'static str;

    /// The op on its CUDA input.
    fn cuda(&self, s: &CudaStorage, l: &Layout) -> CudaOut;
}

/// A custom op of two tensors that runs on CUDA only, as [`CudaOp1`] (`cuda_only_op!(CustomOp2
/// for T)`).
pub trait CudaOp2 {
    /// candle's name of the op.
    const NAME: &'static str;
    /// What the op is called in its refusal on the CPU: "{WHAT} runs on CUDA only".
    const WHAT: &'static str;

    /// The op on its CUDA inputs.
    fn cuda(&self, s1: &CudaStorage, l1: &Layout, s2: &CudaStorage, l2: &Layout) -> CudaOut;
}

/// The error of a CUDA-only op run on the CPU.
pub fn cpu_refusal(what: &str) -> candle_core::Result<(CpuStorage, Shape)> {
    candle_core::bail!("{what} runs on CUDA only")
}

/// Implements candle's `CustomOp1` (`CustomOp2`) for a [`CudaOp1`] ([`CudaOp2`]): its name, a
/// `cpu_fwd` that refuses, and its `cuda` as `cuda_fwd`.
#[doc(hidden)]
#[macro_export]
macro_rules! __df11_cuda_only_op {
    (CustomOp1 for $t:ty) => {
        $crate::cuda::launch::cuda_only_op!(CustomOp1, CudaOp1, $t, s1 l1);
    };
    (CustomOp2 for $t:ty) => {
        $crate::cuda::launch::cuda_only_op!(CustomOp2, CudaOp2, $t, s1 l1 s2 l2);
    };
    ($custom:ident, $cuda:ident, $t:ty, $($s:ident $l:ident)+) => {
        impl candle_core::$custom for $t {
            fn name(&self) -> &'static str {
                <Self as $crate::cuda::launch::$cuda>::NAME
            }

            #[allow(unused_variables)]
            fn cpu_fwd(
                &self,
                $($s: &candle_core::CpuStorage, $l: &candle_core::Layout),+
            ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
                $crate::cuda::launch::cpu_refusal(<Self as $crate::cuda::launch::$cuda>::WHAT)
            }

            fn cuda_fwd(
                &self,
                $($s: &candle_core::CudaStorage, $l: &candle_core::Layout),+
            ) -> $crate::cuda::launch::CudaOut {
                $crate::cuda::launch::$cuda::cuda(self, $($s, $l),+)
            }
        }
    };
}
#[doc(inline)]
pub use __df11_cuda_only_op as cuda_only_op;

/// Pushes a kernel's arguments in order: `push_args!(b; &x, &y)` is `b.arg(&x); b.arg(&y);`.
/// Call sites group them as the kernel's signature in `kernels/*.cu` does, several a line (the
/// `;` keeps rustfmt from putting each on a line of its own).
#[doc(hidden)]
#[macro_export]
macro_rules! __df11_push_args {
    ($b:ident; $($arg:expr),+ $(,)?) => {{
        $($b.arg($arg);)+
    }};
}
#[doc(inline)]
pub use __df11_push_args as push_args;

/// The module of `kernels/df11_fused.cu` (the fused, packed-fused and twin kernels live in it).
pub(crate) const MODULE: Module = fatbin_module!("df11_fused");
pub(crate) const THREADS: u32 = 256;
/// Columns per chunk (one warp's work item); the twin and the DF11 kernel must agree on it.
pub(crate) const CHUNK_WIDTH: usize = 2048;
const MAX_ITEMS: usize = 256;
/// CTAs per SM the kernels are compiled for (`__launch_bounds__(256, 4)`).
const CTAS_PER_SM: u32 = 4;

/// The launch of kernel `name` of the `df11_fused` module with `smem` bytes of dynamic shared
/// memory over `work` CTA-sized pieces (at most one wave of [`CTAS_PER_SM`] CTAs per SM).
/// Checks that `launch` (the device whose stream a unit's kernel is queued on) is a stream of
/// `owner`'s GPU, the unit's device: the kernel reads the unit's buffers directly.
pub(crate) fn check_same_gpu(owner: &CudaDevice, launch: &CudaDevice) -> candle_core::Result<()> {
    if launch.cuda_stream().context().cu_ctx() != owner.cuda_stream().context().cu_ctx() {
        candle_core::bail!("df11: a unit's decode launched on another GPU");
    }
    Ok(())
}

pub(crate) fn launch_config(
    dev: &CudaDevice,
    name: &'static str,
    smem: usize,
    work: usize,
) -> candle_core::Result<LaunchConfig> {
    launch_config_with(dev, name, smem, work, CTAS_PER_SM)
}

/// [`launch_config`] for a kernel compiled for `ctas_per_sm` resident CTAs per SM: the grid is
/// at most one wave of them (each CTA loops over its share of the work).
pub(crate) fn launch_config_with(
    dev: &CudaDevice,
    name: &'static str,
    smem: usize,
    work: usize,
    ctas_per_sm: u32,
) -> candle_core::Result<LaunchConfig> {
    launch_config_in(dev, &MODULE, name, smem, work, ctas_per_sm)
}

/// Bytes of shared memory one CTA may take on `dev`, static and dynamic together, once a kernel
/// opts in.
pub(crate) fn smem_per_block_optin(dev: &CudaDevice) -> candle_core::Result<usize> {
    Ok(dev
        .cuda_stream()
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .w()? as usize)
}

/// The SMs (multiprocessors) of `dev`.
pub(crate) fn multiprocessors(dev: &CudaDevice) -> candle_core::Result<usize> {
    Ok(dev
        .cuda_stream()
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .w()? as usize)
}

/// How many CTAs of `THREADS` threads with `smem` bytes of dynamic shared memory of kernel `name`
/// of `module` an SM of `dev` holds at once (the driver's occupancy: registers, shared memory and
/// the kernel's launch bounds), at least 1; cached per context, kernel and `smem`. For layouts
/// whose grid is "CTAs per SM x SMs": a grid larger than the SMs hold runs in waves.
pub(crate) fn resident_ctas(
    dev: &CudaDevice,
    module: &Module,
    name: &'static str,
    smem: usize,
) -> candle_core::Result<u32> {
    type Key = (usize, &'static str, &'static str, usize);
    static CACHE: std::sync::Mutex<Option<std::collections::HashMap<Key, u32>>> =
        std::sync::Mutex::new(None);
    let ctx = dev.cuda_stream().context().cu_ctx() as usize;
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(Default::default);
    if let Some(&n) = cache.get(&(ctx, module.name(), name, smem)) {
        return Ok(n);
    }
    let func = module.func(dev, name)?;
    allow_dynamic_smem(&func, smem)?;
    let n = func
        .occupancy_max_active_blocks_per_multiprocessor(THREADS, smem, None)
        .w()?
        .max(1);
    cache.insert((ctx, module.name(), name, smem), n);
    Ok(n)
}

/// Lets `func` take `smem` bytes of dynamic shared memory where that is above the 48 KB a kernel
/// gets unasked. Set whenever needed: the attribute belongs to the function handle, and each
/// context loads its own copy of the module. The call is cheap.
fn allow_dynamic_smem(func: &CudaFunction, smem: usize) -> candle_core::Result<()> {
    if smem > 48 * 1024 {
        func.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        )
        .w()?;
    }
    Ok(())
}

/// [`launch_config_with`] for kernel `name` of `module`.
pub(crate) fn launch_config_in(
    dev: &CudaDevice,
    module: &Module,
    name: &'static str,
    smem: usize,
    work: usize,
    ctas_per_sm: u32,
) -> candle_core::Result<LaunchConfig> {
    let max = smem_per_block_optin(dev)?;
    if smem > max {
        candle_core::bail!(
            "df11: the fused kernel needs {smem} bytes of shared memory, the device has {max}"
        );
    }
    if smem > 48 * 1024 {
        allow_dynamic_smem(&*module.func(dev, name)?, smem)?;
    }
    let sms = multiprocessors(dev)? as u32;
    Ok(LaunchConfig {
        grid_dim: ((work as u32).clamp(1, sms * ctas_per_sm), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    })
}

/// How the GEMV kernels split a `[rows, cols]` matrix: chunks of [`CHUNK_WIDTH`] columns (the
/// summation order depends on it: the same for both kernels) and rows per CTA tile (it does not).
pub(crate) struct Tiling {
    pub(crate) nchunks: usize,
    pub(crate) tile_rows: usize,
}

impl Tiling {
    pub(crate) fn new(rows: usize, cols: usize) -> Option<Self> {
        let nchunks = cols.div_ceil(CHUNK_WIDTH);
        if nchunks > MAX_ITEMS {
            return None;
        }
        // Items per tile a multiple of the 8 warps where possible (lcm(8, nchunks)).
        let gcd = (1..=8)
            .rev()
            .find(|d| 8 % d == 0 && nchunks.is_multiple_of(*d))
            .unwrap_or(1);
        let mut tile_rows = 8 / gcd;
        if tile_rows * nchunks > MAX_ITEMS {
            tile_rows = (MAX_ITEMS / nchunks).max(1);
        }
        Some(Self {
            nchunks,
            tile_rows: tile_rows.min(rows.max(1)),
        })
    }

    pub(crate) fn tiles(&self, rows: usize) -> usize {
        rows.div_ceil(self.tile_rows)
    }

    pub(crate) fn partial_bytes(&self, maxb: usize) -> usize {
        self.tile_rows * self.nchunks * maxb * 4
    }
}

/// The row-count variant of a kernel that serves `nb` rows (1, 2, 4 or 8).
pub(crate) fn maxb_for(nb: usize) -> usize {
    match nb {
        0..=1 => 1,
        2 => 2,
        3..=4 => 4,
        _ => 8,
    }
}

/// The fused DF11 (`twin` false) or twin GEMV kernel for `maxb` rows.
pub(crate) fn gemv_name(twin: bool, maxb: usize) -> &'static str {
    match (twin, maxb) {
        (false, 1) => "df11_gemv_bf16_1",
        (false, 2) => "df11_gemv_bf16_2",
        (false, 4) => "df11_gemv_bf16_4",
        (false, _) => "df11_gemv_bf16_8",
        (true, 1) => "bf16_gemv_bf16_1",
        (true, 2) => "bf16_gemv_bf16_2",
        (true, 4) => "bf16_gemv_bf16_4",
        (true, _) => "bf16_gemv_bf16_8",
    }
}

/// A contiguous BF16 view of `s` whose first element is 16-byte aligned.
pub(crate) fn bf16_view<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, bf16>> {
    match l.contiguous_offsets() {
        Some((a, b)) if a.is_multiple_of(8) => Ok(s.as_cuda_slice::<bf16>()?.slice(a..b)),
        _ => {
            candle_core::bail!("df11: the fused kernel needs {what} contiguous and 16-byte aligned")
        }
    }
}

/// Runs `op` (which maps `[rows <= limit, cols]` to `[rows, out]`) over `x` of shape
/// `[..., cols]` in launches of at most `limit` rows, and adds `bias` the way `candle_nn::Linear`
/// does.
pub(crate) fn apply_rows(
    x: &Tensor,
    cols: usize,
    out: usize,
    bias: Option<&Tensor>,
    limit: usize,
    mut op: impl FnMut(&Tensor) -> candle_core::Result<Tensor>,
) -> candle_core::Result<Tensor> {
    let rows = x.elem_count() / cols;
    let x2 = x.reshape((rows, cols))?.contiguous()?;
    // The kernels read x with 16-byte loads: a view starting mid-vector is copied first.
    let x2 = if !x2.layout().start_offset().is_multiple_of(8) {
        x2.copy()?
    } else {
        x2
    };
    let y = if rows <= limit {
        op(&x2)?
    } else {
        let parts = (0..rows)
            .step_by(limit)
            .map(|r| op(&x2.narrow(0, r, limit.min(rows - r))?.contiguous()?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&parts, 0)?
    };
    let mut shape = x.dims().to_vec();
    *shape.last_mut().expect("x has a last dimension") = out;
    let y = y.reshape(shape)?;
    match bias {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// The rows of `x` (layout `x_l`) for a product with `cols` columns: 1 to `limit` whole rows.
pub(crate) fn check_rows(x_l: &Layout, cols: usize, limit: usize) -> candle_core::Result<usize> {
    let n = x_l.shape().elem_count();
    let nb = n.checked_div(cols).unwrap_or(0);
    if nb == 0 || nb > limit || nb * cols != n {
        candle_core::bail!("df11: a fused product called with {n} inputs for {cols} columns");
    }
    Ok(nb)
}

/// Checks a fused DF11 product before launch: `sign_mantissa` (layout `sm_l`) is the unit's whole
/// buffer of `n_elements`, `x` (layout `x_l`) holds 1 to [`FUSED_LIMIT_ROWS`] rows of `cols`, `cols`
/// and `base` are multiples of 8 and the `[rows, cols]` matrix at `base` lies inside the unit.
/// Returns the number of rows of `x`.
pub(crate) fn check_gemv_call(
    sm_l: &Layout,
    n_elements: usize,
    x_l: &Layout,
    base: usize,
    rows: usize,
    cols: usize,
) -> candle_core::Result<usize> {
    if sm_l.start_offset() != 0 || !sm_l.is_contiguous() || sm_l.shape().elem_count() != n_elements
    {
        candle_core::bail!("df11: sign_mantissa must be the unit's whole contiguous buffer");
    }
    let nb = x_l.shape().elem_count().checked_div(cols).unwrap_or(0);
    if nb == 0 || nb > FUSED_LIMIT_ROWS || !cols.is_multiple_of(8) || !base.is_multiple_of(8) {
        candle_core::bail!("df11: fused kernel called with {nb} rows, cols {cols}, base {base}");
    }
    if rows
        .checked_mul(cols)
        .and_then(|n| n.checked_add(base))
        .is_none_or(|end| end > n_elements)
    {
        candle_core::bail!(
            "df11: the [{rows}, {cols}] matrix at element {base} is outside the unit"
        );
    }
    Ok(nb)
}

/// A kernel's output buffer of `len` BF16 values, every one of which the kernel writes; an
/// empty output is one zeroed value (candle needs a buffer, and a copy of it to the host must
/// not read memory nobody wrote: compute-sanitizer's initcheck).
pub fn alloc_out(
    dev: &candle_core::cuda_backend::CudaDevice,
    len: usize,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaSlice<half::bf16>> {
    if len == 0 {
        return dev.alloc_zeros::<half::bf16>(1);
    }
    // SAFETY: the caller's kernel writes all `len` values before anything reads them.
    unsafe { dev.alloc::<half::bf16>(len) }
}
