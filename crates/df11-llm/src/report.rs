//! The human-readable report printed on stderr after a generation.

use std::fmt::Write;

use crate::generate::Generation;

/// Bytes as GiB/MiB.
pub fn human_bytes(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let b = bytes as f64;
    if b >= 1024.0 * MIB {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", b / MIB)
    }
}

/// The report: prompt tokens and prefill speed, generated tokens and decode speed, time to
/// first token, and peak GPU memory.
pub fn report(g: &Generation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "prompt:    {} tokens, prefill {:.1} tok/s",
        g.prompt_tokens.len(),
        g.prefill_tok_s
    );
    let decode = g
        .decode_tok_s
        .map_or_else(|| "n/a".to_string(), |r| format!("{r:.1} tok/s"));
    let _ = writeln!(
        s,
        "generated: {} tokens, decode {decode}",
        g.generated_tokens.len()
    );
    let _ = writeln!(s, "time to first token: {:.1} ms", g.ttft_ms);
    let memory = g
        .peak_gpu_bytes
        .map_or_else(|| "n/a (CPU)".to_string(), human_bytes);
    let _ = write!(s, "peak GPU memory: {memory}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_figure() {
        let g = Generation {
            prompt_tokens: vec![1, 2, 3],
            generated_tokens: vec![4],
            text: "x".into(),
            prefill_tok_s: 10.0,
            decode_tok_s: None,
            ttft_ms: 5.0,
            peak_gpu_bytes: Some(3 * 1024 * 1024 * 1024),
        };
        let r = report(&g);
        assert!(r.contains("3 tokens, prefill 10.0 tok/s"));
        assert!(r.contains("1 tokens, decode n/a"));
        assert!(r.contains("5.0 ms"));
        assert!(r.contains("3.00 GiB"));
        let json = serde_json::to_value(&g).unwrap();
        for key in [
            "prompt_tokens",
            "generated_tokens",
            "text",
            "prefill_tok_s",
            "decode_tok_s",
            "ttft_ms",
            "peak_gpu_bytes",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
    }
}
