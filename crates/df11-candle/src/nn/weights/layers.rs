//! The layers a model builds from its [`ModelWeights`]: [`Linear`] and [`Embedding`] over either
//! kind of weight (compressed or dense), whether projections load stacked, and the
//! `ModelWeights` methods that hand the layers out.

use std::sync::Arc;

use candle_core::{Device, Module, Tensor};

use super::{ModelWeights, Source, WeightFormat};
use crate::error::Result;
use crate::nn::group::Df11Group;
use crate::nn::linear::{Df11Embedding, Df11Linear};
use crate::options::Df11Options;

/// Whether a model on `device` loads projections that read the same input `in_features` wide
/// (q/k/v, gate/up) as one stacked linear layer ([`ModelWeights::stacked_linear`]): on CUDA, for
/// widths of whole 2048-column chunks whose members units tile
/// ([`crate::TileMembers::tiles_whole_chunks`]), where the streaming tensor-core kernel
/// multiplies a DF11 stack in one launch; not where [`Df11Options::stack_projections`] is off
/// (the results are the same bits either way at 1 to 16 rows, where the products are row by
/// row).
pub fn stacks_projections(device: &Device, in_features: usize, options: &Df11Options) -> bool {
    cfg!(feature = "cuda")
        && device.is_cuda()
        && options.stack_projections
        && options.tiles.tiles_whole_chunks(in_features)
}

/// A linear layer loaded from either kind of folder.
#[derive(Debug, Clone)]
pub enum Linear {
    /// Weight kept DF11-compressed.
    Df11(Df11Linear),
    /// Dense weight, with the options its products plan by (the BF16 twin of the fused DF11
    /// kernels at the batch sizes a DF11 weight loaded alike takes them).
    Dense {
        /// The weight and bias.
        linear: candle_nn::Linear,
        /// The options of the model it belongs to.
        options: Df11Options,
    },
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Df11(l) => l.forward(x),
            Self::Dense { linear, options } => {
                // Small batches on CUDA: the BF16 twin of the fused DF11 kernel (same summation
                // order), so a BF16 model and its DF11 copy stay bit-identical.
                #[cfg(feature = "cuda")]
                if let Some(y) =
                    crate::cuda::dense::twin_linear(linear.weight(), linear.bias(), x, options)?
                {
                    return Ok(y);
                }
                #[cfg(not(feature = "cuda"))]
                let _ = options;
                linear.forward(x)
            }
        }
    }
}

impl Linear {
    /// A dense linear layer planned by `options` (see [`Linear::Dense`]).
    pub fn dense(weight: Tensor, bias: Option<Tensor>, options: Df11Options) -> Self {
        Self::Dense {
            linear: candle_nn::Linear::new(weight, bias),
            options,
        }
    }

    /// The same layer running by `options` (see [`Df11Linear::with_options`]).
    pub fn with_options(self, options: Df11Options) -> Self {
        match self {
            Self::Df11(l) => Self::Df11(l.with_options(options)),
            Self::Dense { linear, .. } => Self::Dense { linear, options },
        }
    }

    /// The compressed unit holding the weight (`None` for a dense or decoded weight).
    pub fn group(&self) -> Option<&Arc<Df11Group>> {
        match self {
            Self::Df11(l) => l.group(),
            Self::Dense { .. } => None,
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
    /// The rows of `ids` (on any device: a DF11 table reads them on the host, a dense one where
    /// it lives), on the table's device.
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Df11(e) => e.forward(ids),
            Self::Dense(e) => e.forward(&ids.to_device(e.embeddings().device())?),
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

impl ModelWeights {
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
                let placement = crate::nn::group::UnitPlacement {
                    options: self.options,
                    offloaded: self.offload,
                    shapes,
                };
                let g = Df11Group::load(model, unit, &self.device, &placement)?;
                cache.insert(key, g.clone());
                g
            }
        };
        Ok(Some((g, member)))
    }

    /// Declares that module `module` is a linear layer of `[out_features, in_features]`, ahead of
    /// [`Self::linear`]. A compressed unit loaded afterwards stores its declared members in the
    /// tensor-core tile order on CUDA ([`crate::UnitPlacement::shapes`]): a unit loads at its first
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
        Ok(Linear::dense(w, bias, self.options))
    }

    /// The linear layers `modules` (`(module, out_features)`, each `in_features` wide) as one
    /// whose output is theirs side by side (`[q; k; v]` by rows: one launch where there were
    /// three), where [`stacks_projections`] says so for this device and width; `None` otherwise
    /// (load them one by one). A DF11 stack of consecutive tiled members multiplies in one
    /// streaming launch ([`Df11Linear::stacked`]); a dense one is their weights concatenated.
    /// The decision depends on the device, the options and the width only, never on the
    /// folder's format, so a DF11 model and its BF16 original stack alike (at the cuBLAS batch
    /// sizes the product's shape is part of the result's bits).
    pub fn stacked_linear(
        &self,
        modules: &[(&str, usize)],
        in_features: usize,
        bias: bool,
    ) -> Result<Option<Linear>> {
        if modules.len() < 2 || !stacks_projections(&self.device, in_features, &self.options) {
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
        Ok(Some(Linear::dense(w, bias, self.options)))
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
}
