//! Loading a model's weights from a DF11 folder (kept compressed) or from a plain BF16 folder
//! (dense), behind one interface, so a model file is written once and runs on both: the BF16
//! path is the reference a DF11 model is compared with, bit for bit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Module, Tensor};

use crate::error::{Df11Error, Result};
use crate::format::model::Df11Model;
use crate::format::safetensors_index::{RawTensor, SafetensorsIndex};
use crate::nn::group::Df11Group;
use crate::nn::linear::{Df11Embedding, Df11Linear};

/// `DF11_STACK` (`on`, the default, or `off`): whether [`stacks_projections`] may stack.
static STACK: crate::cuda::setting::Setting<bool> = crate::cuda::setting::Setting::new(
    "DF11_STACK",
    "stack setting",
    &[("on", true), ("off", false)],
);

/// Turns the stacking of projections off or on for models loaded from now on (overrides
/// `DF11_STACK`; the results are the same bits either way at 1 to 16 rows, where the products
/// are row by row).
pub fn set_stack_projections(on: bool) {
    STACK.set(on);
}

/// Whether a model on `device` loads projections that read the same input `in_features` wide
/// (q/k/v, gate/up) as one stacked linear layer ([`ModelWeights::stacked_linear`]): on CUDA, for
/// widths of whole 2048-column chunks whose members units tile
/// ([`crate::cuda::tile_order::tiles_columns`]), where the streaming tensor-core kernel
/// multiplies a DF11 stack in one launch; not under `DF11_STACK=off`.
pub fn stacks_projections(device: &Device, in_features: usize) -> bool {
    cfg!(feature = "cuda")
        && device.is_cuda()
        && STACK.get()
        && crate::cuda::tile_order::tiles_whole_chunks(in_features)
}

/// A linear layer loaded from either kind of folder.
#[derive(Debug, Clone)]
pub enum Linear {
    /// Weight kept DF11-compressed.
    Df11(Df11Linear),
    /// Dense weight.
    Dense(candle_nn::Linear),
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Df11(l) => l.forward(x),
            Self::Dense(l) => {
                // Small batches on CUDA: the BF16 twin of the fused DF11 kernel (same summation
                // order), so a BF16 model and its DF11 copy stay bit-identical.
                #[cfg(feature = "cuda")]
                if let Some(y) = crate::cuda::twin::twin_linear(l.weight(), l.bias(), x)? {
                    return Ok(y);
                }
                l.forward(x)
            }
        }
    }
}

impl Linear {
    /// The compressed unit holding the weight (`None` for a dense or decoded weight).
    pub fn group(&self) -> Option<&Arc<Df11Group>> {
        match self {
            Self::Df11(l) => l.group(),
            Self::Dense(_) => None,
        }
    }
}

/// An embedding loaded from either kind of folder.
#[derive(Debug, Clone)]
pub enum Embedding {
    /// Table kept DF11-compressed.
    Df11(Df11Embedding),
    /// Dense table.
    Dense(candle_nn::Embedding),
}

impl Module for Embedding {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Df11(e) => e.forward(ids),
            Self::Dense(e) => e.forward(ids),
        }
    }
}

impl Embedding {
    /// The table as a tensor (decoded if compressed), e.g. to tie an output projection to it.
    pub fn table(&self) -> Result<Tensor> {
        match self {
            Self::Df11(e) => e.table(),
            Self::Dense(e) => Ok(e.embeddings().clone()),
        }
    }
}

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
    /// Compressed units of this view are offloaded ([`Df11Group::new_offloaded`]).
    offload: bool,
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
    /// Opens `dir` in the given format.
    pub fn open(dir: &Path, format: WeightFormat, device: &Device, dtype: DType) -> Result<Self> {
        use crate::load_profile::{timed, Phase};
        let source = match format {
            WeightFormat::Df11 | WeightFormat::Df11DecodedAtLoad => Source::Df11 {
                model: Box::new(timed(Phase::Open, 0, || {}, || Df11Model::open(dir))?),
                groups: Mutex::new(HashMap::new()),
                shapes: Mutex::new(HashMap::new()),
            },
            WeightFormat::Dense => {
                let index = timed(Phase::Open, 0, || {}, || SafetensorsIndex::open_dir(dir))?;
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
        })
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
            crate::load_profile::Phase::PlainTensors,
            t.data.len(),
            settle,
            || {
                #[cfg(feature = "cuda")]
                if let Device::Cuda(d) = device {
                    let staged =
                        crate::cuda::staged_copy::tensor_from_bytes(d, t.data, src, &shape.into())?;
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

    fn group_of(&self, weight: &str) -> Result<Option<(Arc<Df11Group>, usize)>> {
        let Source::Df11 {
            model,
            groups,
            shapes,
        } = &*self.source
        else {
            return Ok(None);
        };
        let Some((unit, member)) = model.find_member(weight) else {
            return Ok(None);
        };
        let mut cache = groups.lock().expect("group cache lock");
        let key = (
            format!("{:?}", self.device),
            self.offload,
            unit.name.clone(),
        );
        let g = match cache.get(&key) {
            Some(g) => g.clone(),
            None => {
                let shapes: Vec<Option<(usize, usize)>> = {
                    let declared = shapes.lock().expect("shape lock");
                    unit.members
                        .iter()
                        .map(|m| declared.get(m).copied())
                        .collect()
                };
                let form = crate::exponent_form();
                let g =
                    Df11Group::load_shaped(model, unit, &self.device, form, self.offload, &shapes)?;
                cache.insert(key, g.clone());
                g
            }
        };
        Ok(Some((g, member)))
    }

    /// Declares that module `module` is a linear layer of `[out_features, in_features]`, ahead of
    /// [`Self::linear`]. A compressed unit loaded afterwards stores its declared members in the
    /// tensor-core tile order on CUDA ([`Df11Group::new_shaped`]): a unit loads at its first
    /// member's use, so declaring every linear of a layer before loading any lets all of them
    /// be tiled. [`Self::linear`] declares its own. Nothing for dense folders.
    pub fn declare_linear(&self, module: &str, out_features: usize, in_features: usize) {
        if let Source::Df11 { shapes, .. } = &*self.source {
            shapes
                .lock()
                .expect("shape lock")
                .insert(format!("{module}.weight"), (out_features, in_features));
        }
    }

    /// The linear layer of module `module` (weight `module.weight`, optional `module.bias`).
    pub fn linear(
        &self,
        module: &str,
        out_features: usize,
        in_features: usize,
        bias: bool,
    ) -> Result<Linear> {
        self.declare_linear(module, out_features, in_features);
        let weight = format!("{module}.weight");
        let bias = if bias {
            Some(self.tensor(&format!("{module}.bias"), &[out_features])?)
        } else {
            None
        };
        if let Some((g, member)) = self.group_of(&weight)? {
            let l = Df11Linear::new(g, member, out_features, in_features, bias, self.dtype)?;
            let l = if self.format == WeightFormat::Df11DecodedAtLoad {
                l.decoded()?
            } else {
                l
            };
            return Ok(Linear::Df11(l));
        }
        let w = self.tensor(&weight, &[out_features, in_features])?;
        Ok(Linear::Dense(candle_nn::Linear::new(w, bias)))
    }

    /// The linear layers `modules` (`(module, out_features)`, each `in_features` wide) as one
    /// whose output is theirs side by side (`[q; k; v]` by rows: one launch where there were
    /// three), where [`stacks_projections`] says so for this device and width; `None` otherwise
    /// (load them one by one). A DF11 stack of consecutive tiled members multiplies in one
    /// streaming launch ([`Df11Linear::stacked`]); a dense one is their weights concatenated.
    /// The decision depends on the device, the settings and the width only, never on the
    /// folder's format, so a DF11 model and its BF16 original stack alike (at the cuBLAS batch
    /// sizes the product's shape is part of the result's bits).
    pub fn stacked_linear(
        &self,
        modules: &[(&str, usize)],
        in_features: usize,
        bias: bool,
    ) -> Result<Option<Linear>> {
        if modules.len() < 2 || !stacks_projections(&self.device, in_features) {
            return Ok(None);
        }
        for &(m, out) in modules {
            self.declare_linear(m, out, in_features);
        }
        let bias = if bias {
            let parts = modules
                .iter()
                .map(|&(m, out)| self.tensor(&format!("{m}.bias"), &[out]))
                .collect::<Result<Vec<_>>>()?;
            Some(Tensor::cat(&parts, 0)?)
        } else {
            None
        };
        let mut compressed = Vec::new();
        for &(m, out) in modules {
            match self.group_of(&format!("{m}.weight"))? {
                Some((g, member)) => compressed.push((g, member, out)),
                None => break,
            }
        }
        if compressed.len() == modules.len() {
            let l = Df11Linear::stacked(compressed, in_features, bias, self.dtype)?;
            let l = if self.format == WeightFormat::Df11DecodedAtLoad {
                l.decoded()?
            } else {
                l
            };
            return Ok(Some(Linear::Df11(l)));
        }
        if !compressed.is_empty() {
            // Some compressed, some not (no DF11 release mixes them in one layer): one by one.
            return Ok(None);
        }
        let parts = modules
            .iter()
            .map(|&(m, out)| self.tensor(&format!("{m}.weight"), &[out, in_features]))
            .collect::<Result<Vec<_>>>()?;
        let w = Tensor::cat(&parts, 0)?;
        Ok(Some(Linear::Dense(candle_nn::Linear::new(w, bias))))
    }

    /// The embedding of module `module` (table `module.weight`).
    pub fn embedding(&self, module: &str, vocab: usize, hidden: usize) -> Result<Embedding> {
        let weight = format!("{module}.weight");
        if let Some((g, member)) = self.group_of(&weight)? {
            let e = Df11Embedding::new(g, member, vocab, hidden, self.dtype)?;
            let e = if self.format == WeightFormat::Df11DecodedAtLoad {
                e.decoded()?
            } else {
                e
            };
            return Ok(Embedding::Df11(e));
        }
        let w = self.tensor(&weight, &[vocab, hidden])?;
        Ok(Embedding::Dense(candle_nn::Embedding::new(w, hidden)))
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
