//! Loading a model's weights from a DF11 folder (kept compressed) or from a plain BF16 folder
//! (dense), behind one interface, so a model file is written once and runs on both: the BF16
//! path is the reference a DF11 model is compared with, bit for bit. The layers it hands out
//! ([`Linear`], [`Embedding`]) are in `layers`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Tensor};

use crate::error::{Df11Error, Result};
use crate::format::model::Df11Model;
use crate::format::safetensors_index::{RawTensor, SafetensorsIndex};
use crate::nn::group::Df11Group;
use crate::options::Df11Options;

mod layers;
pub use layers::{stacks_projections, Embedding, Linear};

enum Source {
    Df11 {
        model: Box<Df11Model>,
        /// Units already on a device, by device (candle's device, not the GPU: two devices on
        /// one GPU have their own tensors), offloaded or not, and unit name: a unit two modules
        /// share (a tied embedding and output projection) is put on each device once.
        groups: Mutex<HashMap<(String, bool, String), Arc<Df11Group>>>,
        /// `[out, in]` of linear weights declared before their units load
        /// ([`ModelWeights::declare_linear`]).
        shapes: Mutex<HashMap<String, (usize, usize)>>,
    },
    Dense(SafetensorsIndex),
}

/// Which kind of folder [`ModelWeights`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// A DF11 folder; weights stay compressed on the device.
    Df11,
    /// A DF11 folder, every weight decoded once at load (reference mode, BF16-sized memory).
    Df11DecodedAtLoad,
    /// A plain safetensors folder.
    Dense,
}

/// The weights of one model, on one device, in one compute dtype. [`ModelWeights::on_device`]
/// gives a view of the same folder on another device (a model split over several GPUs).
pub struct ModelWeights {
    dir: PathBuf,
    source: Arc<Source>,
    format: WeightFormat,
    device: Device,
    dtype: DType,
    /// Compressed units of this view are offloaded ([`crate::nn::group::UnitPlacement::offloaded`]).
    offload: bool,
    /// How its weights are laid out and multiplied on the device.
    options: Df11Options,
}

impl std::fmt::Debug for ModelWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelWeights")
            .field("dir", &self.dir)
            .field("format", &self.format)
            .field("dtype", &self.dtype)
            .finish()
    }
}

/// candle's dtype for a safetensors dtype.
pub fn candle_dtype(d: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype as S;
    Some(match d {
        S::BF16 => DType::BF16,
        S::F16 => DType::F16,
        S::F32 => DType::F32,
        S::F64 => DType::F64,
        S::U8 => DType::U8,
        S::U32 => DType::U32,
        S::I64 => DType::I64,
        _ => return None,
    })
}

impl ModelWeights {
    /// Opens `dir` in the given format, with the default [`Df11Options`].
    pub fn open(dir: &Path, format: WeightFormat, device: &Device, dtype: DType) -> Result<Self> {
        Self::open_with(dir, format, device, dtype, Df11Options::default())
    }

    /// Opens `dir` in the given format; every weight it hands out follows `options`. A DF11
    /// model and its BF16 original opened with the same options give the same bits.
    pub fn open_with(
        dir: &Path,
        format: WeightFormat,
        device: &Device,
        dtype: DType,
        options: Df11Options,
    ) -> Result<Self> {
        use crate::load_profile::{timed, Phase};
        options.check().map_err(Df11Error::Usage)?;
        let profile = options.profile_load;
        let source = match format {
            WeightFormat::Df11 | WeightFormat::Df11DecodedAtLoad => Source::Df11 {
                model: Box::new(timed(
                    profile,
                    Phase::Open,
                    0,
                    || {},
                    || Df11Model::open(dir),
                )?),
                groups: Mutex::new(HashMap::new()),
                shapes: Mutex::new(HashMap::new()),
            },
            WeightFormat::Dense => {
                let index = timed(
                    profile,
                    Phase::Open,
                    0,
                    || {},
                    || SafetensorsIndex::open_dir(dir),
                )?;
                if index.files().next().is_none() {
                    return Err(Df11Error::NotAModel {
                        path: dir.to_path_buf(),
                        reason: "no *.safetensors files in this folder".into(),
                    });
                }
                if index.names().any(|n| n.ends_with(".encoded_exponent")) {
                    return Err(Df11Error::InvalidConfig {
                        path: dir.to_path_buf(),
                        reason: "this folder holds DF11-compressed units; open it as DF11".into(),
                    });
                }
                Source::Dense(index)
            }
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            source: Arc::new(source),
            format,
            device: device.clone(),
            dtype,
            offload: false,
            options,
        })
    }

    /// The options its weights follow.
    pub fn options(&self) -> &Df11Options {
        &self.options
    }

    /// The same weights, put on `device` by the modules made from the view (the folder is
    /// opened and validated once; each unit is put on each device at most once).
    pub fn on_device(&self, device: &Device) -> Self {
        Self {
            dir: self.dir.clone(),
            source: self.source.clone(),
            format: self.format,
            device: device.clone(),
            dtype: self.dtype,
            offload: false,
            options: self.options,
        }
    }

    /// The same weights, with their compressed units offloaded: kept in host memory (pinned on
    /// CUDA) and put on the device only while staged ([`Df11Group::stage`]). A DF11 folder
    /// only: dense weights are refused.
    pub fn offloaded(&self) -> Result<Self> {
        if !matches!(self.format, WeightFormat::Df11) {
            return Err(Df11Error::Usage(format!(
                "{}: only DF11 weights kept compressed can be offloaded",
                self.dir.display()
            )));
        }
        Ok(Self {
            offload: true,
            ..self.on_device(&self.device)
        })
    }

    /// The same weights building their units' device forms on the host (the CPU) rather than
    /// on the GPU ([`Df11Options::gpu_pack`] off): slower, but no transient device memory
    /// beyond the form itself. The forms are the same bytes either way.
    pub fn built_on_host(&self) -> Self {
        let mut view = self.on_device(&self.device);
        view.offload = self.offload;
        view.options.gpu_pack = false;
        view
    }

    /// Whether compressed units of this view are offloaded.
    pub fn is_offloaded(&self) -> bool {
        self.offload
    }

    /// Bytes each stored weight takes in the folder, by the name modules ask for: a DF11
    /// unit's six tensors under the name of its first member, every other tensor under its
    /// own name. (A unit's device form is within a few percent of its file bytes.)
    pub fn stored_bytes(&self) -> Vec<(String, usize)> {
        match &*self.source {
            Source::Df11 { model, .. } => {
                let units = model.units().iter().filter_map(|u| {
                    let first = u.members.first()?;
                    Some((first.clone(), model.unit_bytes(u)))
                });
                let plain = model.plain_tensors().iter().filter_map(|name| {
                    let t = model.plain_tensor(name)?;
                    Some((name.clone(), t.data.len()))
                });
                units.chain(plain).collect()
            }
            Source::Dense(index) => index
                .names()
                .filter_map(|name| Some((name.to_string(), index.get(name)?.data.len())))
                .collect(),
        }
    }

    /// [`Self::stored_bytes`] with each DF11 unit counted at the most its device form can take
    /// (for budgets): the packed form at its largest accepted size
    /// ([`crate::packed::MAX_BITS_PER_WEIGHT`] plus the 8 bits of `sign_mantissa`, and 4 KiB
    /// for its tables and padding), or the Huffman form (the file's bytes plus its segment
    /// index, [`crate::SegmentIndex::max_device_bytes`]), whichever is larger.
    pub fn device_bytes_bound(&self) -> Vec<(String, usize)> {
        let Source::Df11 { model, .. } = &*self.source else {
            return self.stored_bytes();
        };
        let bound = |u: &crate::format::model::Df11Unit| {
            let n = u.layout.n_elements;
            let packed = (n as f64 * (8.0 + crate::packed::MAX_BITS_PER_WEIGHT) / 8.0).ceil();
            let huffman = model.unit_bytes(u) + crate::SegmentIndex::max_device_bytes(n);
            (packed as usize + 4096).max(huffman)
        };
        let units = model
            .units()
            .iter()
            .filter_map(|u| Some((u.members.first()?.clone(), bound(u))));
        let plain = model.plain_tensors().iter().filter_map(|name| {
            let t = model.plain_tensor(name)?;
            Some((name.clone(), t.data.len()))
        });
        units.chain(plain).collect()
    }

    /// The name of every weight in the folder, compressed or plain (a DF11 unit's weights by
    /// the names modules ask for, e.g. `model.layers.0.mlp.up_proj.weight`), sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = match &*self.source {
            Source::Df11 { model, .. } => model
                .compressed_weights()
                .map(str::to_string)
                .chain(model.plain_tensors().iter().cloned())
                .collect(),
            Source::Dense(index) => index.names().map(str::to_string).collect(),
        };
        names.sort();
        names
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The format read.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// The device weights are put on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The compute dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The opened DF11 model, when reading one.
    pub fn df11_model(&self) -> Option<&Df11Model> {
        match &*self.source {
            Source::Df11 { model, .. } => Some(model),
            Source::Dense(_) => None,
        }
    }

    /// Whether a weight `name` (e.g. `lm_head.weight`) exists, compressed or plain.
    pub fn contains(&self, name: &str) -> bool {
        match &*self.source {
            Source::Df11 { model, .. } => {
                model.find_member(name).is_some() || model.plain_tensor(name).is_some()
            }
            Source::Dense(index) => index.contains(name),
        }
    }

    fn raw(&self, name: &str) -> Result<(RawTensor<'_>, PathBuf)> {
        let (t, path) = match &*self.source {
            Source::Df11 { model, .. } => (model.plain_tensor(name), model.path_of(name)),
            Source::Dense(index) => (index.get(name), index.path_of(name)),
        };
        let t = t.ok_or_else(|| Df11Error::MissingTensor {
            path: self.dir.clone(),
            tensor: name.to_string(),
        })?;
        Ok((t, path))
    }

    /// A plain tensor with an expected shape, converted to `dtype`.
    pub fn tensor_as(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let (t, path) = self.raw(name)?;
        if t.shape != shape {
            return Err(Df11Error::WrongShape {
                path,
                tensor: name.to_string(),
                expected: format!("{shape:?}"),
                found: t.shape.to_vec(),
            });
        }
        let src = candle_dtype(t.dtype).ok_or_else(|| Df11Error::WrongDtype {
            path: path.clone(),
            tensor: name.to_string(),
            expected: "a float or integer dtype candle supports".into(),
            found: format!("{:?}", t.dtype),
        })?;
        let device = &self.device;
        let settle = || {
            let _ = device.synchronize();
        };
        crate::load_profile::timed(
            self.options.profile_load,
            crate::load_profile::Phase::PlainTensors,
            t.data.len(),
            settle,
            || {
                #[cfg(feature = "cuda")]
                if let Device::Cuda(d) = device {
                    let staged = crate::cuda::staged_copy::tensor_from_bytes(
                        d,
                        t.data,
                        src,
                        &shape.into(),
                        self.options.staged_copy,
                    )?;
                    if let Some(x) = staged {
                        return Ok(x.to_dtype(dtype)?);
                    }
                }
                Ok(Tensor::from_raw_buffer(t.data, src, shape, device)?.to_dtype(dtype)?)
            },
        )
    }

    /// A plain tensor in the compute dtype.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.tensor_as(name, shape, self.dtype)
    }

    /// Bytes of compressed units resident on devices so far (every device of every view).
    pub fn loaded_unit_bytes(&self) -> usize {
        match &*self.source {
            Source::Df11 { groups, .. } => groups
                .lock()
                .expect("group cache lock")
                .values()
                .map(|g| g.device_bytes())
                .sum(),
            Source::Dense(_) => 0,
        }
    }
}
