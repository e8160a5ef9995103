//! The decoder layer's gated MLP: `down(act(gate(x)) * up(x))`, gate/up two projections or one
//! stacked.

use candle_core::{Module, Tensor};
use df11_candle::{Linear, ModelWeights};

use crate::activation::gated;
use crate::error::Result;
use crate::spec::DecoderSpec;

/// The gate/up projections: two, or one whose rows are `[gate; up]`.
enum GateUpProj {
    Separate { gate: Linear, up: Linear },
    Fused(Linear),
}

/// The gated MLP: `down(act(gate(x)) * up(x))`.
pub struct GatedMlp {
    gate_up: GateUpProj,
    down_proj: Linear,
    intermediate: usize,
    activation: crate::spec::Activation,
    /// The activation's CUDA launch may be a programmatic dependent launch.
    pdl: bool,
}

impl GatedMlp {
    /// The projections.
    pub(super) fn linears(&self) -> Vec<&Linear> {
        let mut all = match &self.gate_up {
            GateUpProj::Separate { gate, up } => vec![gate, up],
            GateUpProj::Fused(gate_up) => vec![gate_up],
        };
        all.push(&self.down_proj);
        all
    }

    /// The projections' names and `[out, in]` shapes ([`Self::load`] loads them with these).
    pub(super) fn projections(spec: &DecoderSpec) -> Vec<(&'static str, usize, usize)> {
        let (hidden, inter) = (spec.hidden_size, spec.intermediate_size);
        let mut all = if spec.fused_gate_up {
            vec![("gate_up_proj", 2 * inter, hidden)]
        } else {
            vec![("gate_proj", inter, hidden), ("up_proj", inter, hidden)]
        };
        all.push(("down_proj", hidden, inter));
        all
    }

    /// Loads `{prefix}.{gate,up,down}_proj` (or `gate_up_proj`, `down_proj`).
    pub fn load(spec: &DecoderSpec, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let shapes = Self::projections(spec);
        let linear = |name: &str| {
            let &(_, out, inp) = shapes
                .iter()
                .find(|p| p.0 == name)
                .expect("a name of Self::projections");
            weights.linear(&format!("{prefix}.{name}"), out, inp, spec.mlp_bias)
        };
        let stacked = if spec.fused_gate_up {
            None
        } else {
            // gate and up read the same input: one stacked layer where the weights allow it.
            let names = ["gate_proj", "up_proj"].map(|n| format!("{prefix}.{n}"));
            let modules: Vec<(&str, usize)> = names
                .iter()
                .map(|n| (n.as_str(), spec.intermediate_size))
                .collect();
            weights.stacked_linear(&modules, spec.hidden_size, spec.mlp_bias)?
        };
        let gate_up = if spec.fused_gate_up {
            GateUpProj::Fused(linear("gate_up_proj")?)
        } else if let Some(gate_up) = stacked {
            GateUpProj::Fused(gate_up)
        } else {
            GateUpProj::Separate {
                gate: linear("gate_proj")?,
                up: linear("up_proj")?,
            }
        };
        Ok(Self {
            gate_up,
            down_proj: linear("down_proj")?,
            intermediate: spec.intermediate_size,
            activation: spec.activation,
            pdl: weights.options().pdl,
        })
    }

    /// Applies the MLP.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // A stacked gate/up output on CUDA in BF16: the activation reads its two halves in place.
        #[cfg(feature = "cuda")]
        if let (GateUpProj::Fused(gate_up), crate::spec::Activation::Silu) =
            (&self.gate_up, self.activation)
        {
            if x.device().is_cuda() && x.dtype() == candle_core::DType::BF16 {
                let both = gate_up.forward(x)?;
                let act = crate::ops::silu_mul_halves_bf16(&both, self.pdl)?;
                return Ok(self.down_proj.forward(&act)?);
            }
        }
        let (gate, up) = match &self.gate_up {
            GateUpProj::Separate { gate, up } => (gate.forward(x)?, up.forward(x)?),
            GateUpProj::Fused(gate_up) => {
                let both = gate_up.forward(x)?;
                let last = both.rank() - 1;
                (
                    both.narrow(last, 0, self.intermediate)?,
                    both.narrow(last, self.intermediate, self.intermediate)?,
                )
            }
        };
        Ok(self
            .down_proj
            .forward(&gated(self.activation, &gate, &up, self.pdl)?)?)
    }
}
