//! Our kernels' modules, loaded once per CUDA context from what the build script made of each
//! `kernels/*.cu`: a fatbin with SASS for `CUDA_COMPUTE_CAP` and that target's PTX (which the
//! driver compiles for newer GPUs).
//!
//! Why not candle's `get_or_load_custom_func`: it takes PTX text, which the driver compiles at
//! the first load of each module on a machine whose JIT cache does not hold it yet: ~1.6 s of a
//! fresh H100's first DF11 load (docs/PERFORMANCE.md), and again after every change
//! of a kernel. With SASS in the image nothing is compiled where the build's target runs.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaModule, CudaStream, LaunchArgs};
use candle_core::cuda_backend::cudarc::nvrtc::Ptx;
use candle_core::cuda_backend::{CudaDevice, WrapErr};

/// A module's code.
#[derive(Clone, Copy)]
enum Image {
    /// The build's fatbin (`$OUT_DIR/<name>.fatbin`).
    Fatbin(&'static [u8]),
    /// PTX text (measurement overrides: `crate::tuning`).
    Ptx(&'static str),
}

/// One module of kernels: its name (unique among our modules) and its code.
#[derive(Clone, Copy)]
pub struct Module {
    name: &'static str,
    image: Image,
}

/// The module built from `kernels/<name>.cu` (the build script's fatbin).
#[doc(hidden)]
#[macro_export]
macro_rules! __df11_fatbin_module {
    ($name:literal) => {
        $crate::cuda::module::Module::fatbin(
            $name,
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".fatbin")),
        )
    };
}
#[doc(inline)]
pub use __df11_fatbin_module as fatbin_module;

/// Loaded modules by CUDA context and module name. Never emptied: a module lives as long as the
/// process, as candle's do per device.
type Loaded = HashMap<(usize, &'static str), Arc<CudaModule>>;
static LOADED: Mutex<Option<Loaded>> = Mutex::new(None);

impl Module {
    /// A module from a fatbin image.
    pub const fn fatbin(name: &'static str, image: &'static [u8]) -> Self {
        Self {
            name,
            image: Image::Fatbin(image),
        }
    }

    /// The module's name (its kernels file, or the name an override was given).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// A module from PTX text.
    pub const fn ptx(name: &'static str, text: &'static str) -> Self {
        Self {
            name,
            image: Image::Ptx(text),
        }
    }

    /// Kernel `kernel` of this module, for launches on `dev`'s stream (the module is loaded
    /// into `dev`'s context at its first use there).
    pub fn func(&self, dev: &CudaDevice, kernel: &str) -> candle_core::Result<Kernel> {
        let stream = dev.cuda_stream();
        let ctx = stream.context();
        let key = (ctx.cu_ctx() as usize, self.name);
        let module = {
            let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
            let loaded = loaded.get_or_insert_with(HashMap::new);
            match loaded.get(&key) {
                Some(m) => m.clone(),
                None => {
                    // A copy: the driver reads the image from an 8-byte aligned address.
                    let code = match self.image {
                        Image::Fatbin(bytes) => Ptx::from_binary(bytes.to_vec()),
                        Image::Ptx(text) => Ptx::from_src(text),
                    };
                    let m = ctx.load_module(code).w()?;
                    loaded.insert(key, m.clone());
                    m
                }
            }
        };
        let func = module.load_function(kernel).w()?;
        Ok(Kernel { func, stream })
    }
}

/// A kernel and the stream it is launched on.
pub struct Kernel {
    func: CudaFunction,
    stream: Arc<CudaStream>,
}

impl Kernel {
    /// A launch of the kernel on its stream.
    pub fn builder(&self) -> LaunchArgs<'_> {
        self.stream.launch_builder(&self.func)
    }
}

impl Deref for Kernel {
    type Target = CudaFunction;

    fn deref(&self) -> &CudaFunction {
        &self.func
    }
}
