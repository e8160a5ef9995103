//! Built-in `pattern_dict`s: the ones the DFloat11 Hub releases use, per architecture.

use serde_json::Value;

use crate::format::config::PatternDict;

/// Members of a decoder layer with separate projections, in the releases' order.
pub const LAYER_MEMBERS: [&str; 7] = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
];

/// Members of a Phi-3/Phi-4 decoder layer (fused projections), in the release's order.
pub const PHI3_LAYER_MEMBERS: [&str; 4] = [
    "self_attn.o_proj",
    "self_attn.qkv_proj",
    "mlp.gate_up_proj",
    "mlp.down_proj",
];

/// Members of a FLUX double-stream block (diffusers' `transformer_blocks.N`), in the order of
/// the official compressor's FLUX example (`examples/compress_flux1/compress_flux.py`; note
/// add_k, add_v, add_q).
pub const FLUX_DOUBLE_BLOCK_MEMBERS: [&str; 14] = [
    "norm1.linear",
    "norm1_context.linear",
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.add_q_proj",
    "attn.to_out.0",
    "attn.to_add_out",
    "ff.net.0.proj",
    "ff.net.2",
    "ff_context.net.0.proj",
    "ff_context.net.2",
];

/// Members of a FLUX single-stream block (`single_transformer_blocks.N`), in the example's order.
pub const FLUX_SINGLE_BLOCK_MEMBERS: [&str; 6] = [
    "norm.linear",
    "proj_mlp",
    "proj_out",
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
];

/// The diffusers class of a config (`_class_name`), for diffusers models (no `model_type`).
pub fn diffusers_class(config: &Value) -> Option<&str> {
    config.get("_class_name").and_then(Value::as_str)
}

fn dict(entries: &[(&str, &[&str])]) -> PatternDict {
    PatternDict::new(entries).expect("built-in patterns are valid regexes")
}

/// The `pattern_dict` the DFloat11 releases use for a model with this `config.json`:
/// - Qwen3, Qwen2, Phi-3/4 (unescaped dots) and Llama, Mistral (escaped dots): `lm_head`, the
///   embedding and the layers; a model with tied embeddings compresses its layers only (as
///   Qwen3-4B-DF11 does);
/// - Gemma 3 (`Gemma3ForConditionalGeneration`, transformers 4.50 names): the language model's
///   layers only; a text-only `gemma3_text` checkpoint: `model.layers`;
/// - FLUX (diffusers' `FluxTransformer2DModel`): every double- and single-stream block, as the
///   DFloat11 FLUX.1 releases (the official FLUX example's pattern).
pub fn builtin_pattern_dict(config: &Value) -> Result<PatternDict, String> {
    if let Some(class) = diffusers_class(config) {
        return match class {
            "FluxTransformer2DModel" => Ok(dict(&[
                (r"transformer_blocks\.\d+", &FLUX_DOUBLE_BLOCK_MEMBERS),
                (
                    r"single_transformer_blocks\.\d+",
                    &FLUX_SINGLE_BLOCK_MEMBERS,
                ),
            ])),
            other => Err(format!(
                "no built-in pattern_dict for the diffusers model `{other}`; pass one with \
                 --pattern-dict"
            )),
        };
    }
    let model_type = config
        .get("model_type")
        .and_then(Value::as_str)
        .ok_or("config.json has no model_type")?;
    let tied = config
        .get("tie_word_embeddings")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let layers: &[&str] = &LAYER_MEMBERS;
    Ok(match model_type {
        "qwen3" | "qwen2" => {
            if tied {
                dict(&[(r"model.layers.\d+", layers)])
            } else {
                dict(&[
                    ("lm_head", &[]),
                    ("model.embed_tokens", &[]),
                    (r"model.layers.\d+", layers),
                ])
            }
        }
        "llama" | "mistral" => {
            if tied {
                dict(&[(r"model\.layers\.\d+", layers)])
            } else {
                dict(&[
                    ("lm_head", &[]),
                    (r"model\.embed_tokens", &[]),
                    (r"model\.layers\.\d+", layers),
                ])
            }
        }
        "phi3" => {
            let phi: &[&str] = &PHI3_LAYER_MEMBERS;
            if tied {
                dict(&[(r"model.layers.\d+", phi)])
            } else {
                dict(&[
                    ("lm_head", &[]),
                    ("model.embed_tokens", &[]),
                    (r"model.layers.\d+", phi),
                ])
            }
        }
        "gemma3" => dict(&[(r"language_model.model.layers.\d+", layers)]),
        "gemma3_text" => dict(&[(r"model.layers.\d+", layers)]),
        other => {
            return Err(format!(
                "no built-in pattern_dict for model_type `{other}`; pass one with --pattern-dict"
            ))
        }
    })
}
