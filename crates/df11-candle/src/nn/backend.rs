//! [`Df11Backend`]: a candle [`VarBuilder`] backend over a DF11 model folder, so that any model
//! written against `VarBuilder` (every model of candle-transformers) loads from a DF11 repo
//! unchanged.
//!
//! ```
//! use candle_core::{DType, Device};
//! use df11_candle::Df11Backend;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/models/qwen3-tiny/df11");
//! let vb = Df11Backend::open(dir)?.into_var_builder(DType::F32, &Device::Cpu);
//! // A compressed weight, decoded from its unit `model.layers.0`:
//! let q = vb.get((128, 128), "model.layers.0.self_attn.q_proj.weight")?;
//! assert_eq!(q.dims(), &[128, 128]);
//! // A plain tensor, as stored:
//! let norm = vb.pp("model.norm").get(128, "weight")?;
//! assert_eq!(norm.dtype(), DType::F32);
//! # Ok(()) }
//! ```
//!
//! # Memory: weights are kept decoded
//!
//! A model built through this backend holds every weight **decoded** (BF16-sized memory, or
//! F32-sized when it asks for F32): candle-transformers' layers keep plain tensors. This is the
//! way to run an unmodified model, and the reference to compare with; it saves disk and download,
//! not memory. To keep the weights compressed in memory (decoded just before each matmul), build
//! the model on [`ModelWeights`](crate::ModelWeights) / [`Df11Linear`](crate::Df11Linear), as the
//! model crates of this workspace do (`models/qwen3-df11`).
//!
//! # Decoding
//!
//! A unit (e.g. `model.layers.0`, holding q, k, v, o, gate, up and down) is put on the device
//! asked for and decoded whole by [`Df11Group`]: the CPU decoder on the CPU, the CUDA kernel on
//! CUDA. The backend caches **only the last decoded unit** and hands its members out as tensors
//! of their own (copied out of the unit, or converted to the dtype asked for), so a decoded unit
//! is freed as soon as the next one is decoded. Models load their weights layer by layer, so each
//! unit is decoded once, and the extra memory while loading is one decoded unit (the group's
//! compressed copy on the device lives only while its unit decodes). A unit asked for again after
//! another one is decoded again (correct, only slower); [`Df11Backend::units_decoded`] counts the
//! decodes, and [`Df11Backend::clear_cache`] frees the last unit once the model is built.
//!
//! # Names, shapes and errors
//!
//! Names are the BF16 checkpoint's (`model.layers.0.self_attn.q_proj.weight`). A compressed weight
//! is stored flat, without its shape: `get` checks that the requested shape has the member's
//! element count and reshapes to it; `get_unchecked` returns it flat (`[n_elements]`). Plain
//! tensors are checked dim for dim. With `tie_word_embeddings: true` in `config.json` and no
//! `lm_head.weight` in the folder, `lm_head.weight` resolves to `model.embed_tokens.weight`.
//! Failures are [`Df11Error`]s naming the file and the tensor; through the [`SimpleBackend`] trait
//! they become candle errors carrying that message ([`Df11Backend::tensor`] returns the typed
//! error).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};

use crate::error::{Df11Error, Result};
use crate::format::model::Df11Model;
use crate::nn::group::Df11Group;
use crate::nn::weights::candle_dtype;

/// A [`SimpleBackend`] serving the weights of a DF11 model folder, decoded.
///
/// Cloning is cheap and shares the model and the cache (e.g. keep a clone to read
/// [`units_decoded`](Self::units_decoded) after giving one to a `VarBuilder`). See the
/// [module docs](crate::nn::backend) for memory use, caching and name resolution.
#[derive(Clone)]
pub struct Df11Backend {
    inner: Arc<Inner>,
}

struct Inner {
    model: Df11Model,
    tied: bool,
    /// The last decoded unit.
    cache: Mutex<Option<DecodedUnit>>,
    decodes: AtomicUsize,
}

/// A whole unit decoded on a device: BF16 `[n_elements]`.
struct DecodedUnit {
    unit: usize,
    device: Device,
    values: Tensor,
}

/// What a name resolves to.
enum Target<'a> {
    /// Member `member` of unit `unit` (indices into [`Df11Model::units`]).
    Member { unit: usize, member: usize },
    /// A plain tensor under this name.
    Plain(&'a str),
}

impl std::fmt::Debug for Df11Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Df11Backend")
            .field("dir", &self.inner.model.dir())
            .field("units", &self.inner.model.units().len())
            .field("tie_word_embeddings", &self.inner.tied)
            .finish()
    }
}

/// The embedding a tied `lm_head.weight` stands for: `<prefix>lm_head.weight` →
/// `<prefix>model.embed_tokens.weight`.
fn tied_embedding_name(name: &str) -> Option<String> {
    let prefix = name.strip_suffix("lm_head.weight")?;
    (prefix.is_empty() || prefix.ends_with('.'))
        .then(|| format!("{prefix}model.embed_tokens.weight"))
}

/// Whether `config.json` ties the output projection to the embedding (top level, or the
/// `text_config` of multimodal configs). Absent means not tied.
fn config_ties(config: &serde_json::Value) -> bool {
    let key = "tie_word_embeddings";
    config
        .get(key)
        .or_else(|| config.get("text_config").and_then(|t| t.get(key)))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// A typed error as a candle error: candle's own errors pass through (with the tensor named),
/// ours become a message.
fn to_candle(name: &str, e: Df11Error) -> candle_core::Error {
    match e {
        Df11Error::Candle(e) => e.context(format!("df11: loading tensor `{name}`")),
        e => candle_core::Error::wrap(e),
    }
}

impl Df11Backend {
    /// Opens and validates the DF11 folder `dir` ([`Df11Model::open`]); nothing is decoded yet.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Ok(Self::from_model(Df11Model::open(dir)?))
    }

    /// A backend over an already opened model.
    pub fn from_model(model: Df11Model) -> Self {
        let tied = config_ties(model.config_json());
        Self {
            inner: Arc::new(Inner {
                model,
                tied,
                cache: Mutex::new(None),
                decodes: AtomicUsize::new(0),
            }),
        }
    }

    /// A `VarBuilder` over this backend, loading tensors in `dtype` onto `device`.
    pub fn into_var_builder(self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self), dtype, device.clone())
    }

    /// The opened model.
    pub fn model(&self) -> &Df11Model {
        &self.inner.model
    }

    /// Whether `lm_head.weight` is tied to the embedding (`tie_word_embeddings` in config.json).
    pub fn tie_word_embeddings(&self) -> bool {
        self.inner.tied
    }

    /// How many unit decodes the backend has run so far (all clones together).
    pub fn units_decoded(&self) -> usize {
        self.inner.decodes.load(Ordering::Relaxed)
    }

    /// Drops the cached decoded unit (it is otherwise kept until the next unit is decoded or the
    /// backend is dropped).
    pub fn clear_cache(&self) {
        *self.inner.cache.lock().expect("df11 backend cache lock") = None;
    }

    fn resolve<'a>(&self, name: &'a str) -> Option<Target<'a>> {
        let model = &self.inner.model;
        if let Some((unit, member)) = model.find_member(name) {
            let unit = model.units().iter().position(|u| u.name == unit.name)?;
            return Some(Target::Member { unit, member });
        }
        if model.plain_tensor(name).is_some() {
            return Some(Target::Plain(name));
        }
        None
    }

    /// Whether `get` can serve `name`: a compressed weight, a plain tensor, or a tied
    /// `lm_head.weight`.
    pub fn contains(&self, name: &str) -> bool {
        self.resolve(name).is_some()
            || (self.inner.tied
                && tied_embedding_name(name).is_some_and(|e| self.resolve(&e).is_some()))
    }

    /// The tensor `name` on `device` in `dtype`, decoded if compressed. With `shape`, the stored
    /// tensor must match it (compressed weights: its element count) and the result has it;
    /// without, a compressed weight comes back flat.
    pub fn tensor(
        &self,
        name: &str,
        shape: Option<&Shape>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let tied = self.inner.tied.then(|| tied_embedding_name(name)).flatten();
        let target = match (self.resolve(name), &tied) {
            (Some(t), _) => t,
            (None, Some(embedding)) => self.resolve(embedding).ok_or_else(|| self.missing(name))?,
            (None, None) => return Err(self.missing(name)),
        };
        match target {
            Target::Member { unit, member } => {
                self.member(unit, member, name, shape, dtype, device)
            }
            Target::Plain(stored) => self.plain(stored, name, shape, dtype, device),
        }
    }

    fn missing(&self, name: &str) -> Df11Error {
        Df11Error::MissingTensor {
            path: self.inner.model.dir().to_path_buf(),
            tensor: name.to_string(),
        }
    }

    fn member(
        &self,
        unit: usize,
        member: usize,
        name: &str,
        shape: Option<&Shape>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let model = &self.inner.model;
        let u = &model.units()[unit];
        let range = u.member_range(member);
        if let Some(s) = shape {
            if s.elem_count() != range.len() {
                return Err(Df11Error::WrongShape {
                    path: model.path_of(&u.tensor_name("encoded_exponent")),
                    tensor: name.to_string(),
                    expected: format!(
                        "{:?} ({} elements; DF11 stores the weight flat in unit `{}`)",
                        s.dims(),
                        s.elem_count(),
                        u.name
                    ),
                    found: vec![range.len()],
                });
            }
        }
        let values = self.decoded_unit(unit, device)?;
        let flat = values.narrow(0, range.start, range.len())?;
        let t = match shape {
            Some(s) => flat.reshape(s)?,
            None => flat,
        };
        // Each weight gets its own storage: a view would keep the whole unit alive and make
        // candle's CPU BF16 matmul widen the whole unit at every call.
        Ok(if dtype == DType::BF16 {
            t.force_contiguous()?
        } else {
            t.to_dtype(dtype)?
        })
    }

    /// Unit `unit` decoded on `device`: from the cache, or decoded now (and cached instead of
    /// the previous one).
    fn decoded_unit(&self, unit: usize, device: &Device) -> Result<Tensor> {
        let mut cache = self.inner.cache.lock().expect("df11 backend cache lock");
        if let Some(c) = cache.as_ref() {
            if c.unit == unit && c.device.same_device(device) {
                return Ok(c.values.clone());
            }
        }
        // Free the previous unit before decoding the next one.
        *cache = None;
        let model = &self.inner.model;
        let placement = crate::nn::group::UnitPlacement::default();
        let group = Df11Group::load(model, &model.units()[unit], device, &placement)?;
        let values = group.decode()?;
        group.check_status()?;
        self.inner.decodes.fetch_add(1, Ordering::Relaxed);
        *cache = Some(DecodedUnit {
            unit,
            device: device.clone(),
            values: values.clone(),
        });
        Ok(values)
    }

    fn plain(
        &self,
        stored: &str,
        name: &str,
        shape: Option<&Shape>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let model = &self.inner.model;
        let raw = model
            .plain_tensor(stored)
            .ok_or_else(|| self.missing(name))?;
        let path = model.path_of(stored);
        if let Some(s) = shape {
            if s.dims() != raw.shape {
                return Err(Df11Error::WrongShape {
                    path,
                    tensor: name.to_string(),
                    expected: format!("{:?}", s.dims()),
                    found: raw.shape.to_vec(),
                });
            }
        }
        let src = candle_dtype(raw.dtype).ok_or_else(|| Df11Error::WrongDtype {
            path,
            tensor: name.to_string(),
            expected: "a float or integer dtype candle supports".into(),
            found: format!("{:?}", raw.dtype),
        })?;
        let t = Tensor::from_raw_buffer(raw.data, src, raw.shape, device)?;
        Ok(t.to_dtype(dtype)?)
    }
}

impl SimpleBackend for Df11Backend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.tensor(name, Some(&s), dtype, dev)
            .map_err(|e| to_candle(name, e))
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.tensor(name, None, dtype, dev)
            .map_err(|e| to_candle(name, e))
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::tied_embedding_name;

    #[test]
    fn tied_names() {
        assert_eq!(
            tied_embedding_name("lm_head.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(
            tied_embedding_name("language_model.lm_head.weight").as_deref(),
            Some("language_model.model.embed_tokens.weight")
        );
        assert_eq!(tied_embedding_name("my_lm_head.weight"), None);
        assert_eq!(tied_embedding_name("lm_head.bias"), None);
    }
}
