//! The server's counters, served at `GET /metrics` in Prometheus' text format.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters and gauges, updated by the HTTP side and the scheduler.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
    completed: AtomicU64,
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    queue_depth: AtomicU64,
    batch_size: AtomicU64,
    ttft_micros_sum: AtomicU64,
    ttft_count: AtomicU64,
    step_micros_sum: AtomicU64,
    step_rows_sum: AtomicU64,
    /// Generated tokens per second of the last decode step, times 1000.
    step_rate_milli: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    /// A request reached a generation endpoint.
    pub fn request(&self) {
        add(&self.requests, 1);
    }

    /// A request was answered with a 4xx before reaching the model.
    pub fn rejected(&self) {
        add(&self.rejected, 1);
    }

    /// The model failed on a request.
    pub fn failed(&self) {
        add(&self.failed, 1);
    }

    /// A client went away before its request ended.
    pub fn cancelled(&self) {
        add(&self.cancelled, 1);
    }

    /// A prompt of `tokens` was prefilled, `ttft` after the request arrived (its first token
    /// is sampled right after).
    pub fn prompt(&self, tokens: usize, ttft: Duration) {
        add(&self.prompt_tokens, tokens as u64);
        add(&self.ttft_micros_sum, ttft.as_micros() as u64);
        add(&self.ttft_count, 1);
    }

    /// A request ended normally with `generated` tokens.
    pub fn done(&self, generated: usize) {
        add(&self.completed, 1);
        add(&self.generated_tokens, generated as u64);
    }

    /// Requests waiting for a slot.
    pub fn set_queue(&self, n: usize) {
        self.queue_depth.store(n as u64, Ordering::Relaxed);
    }

    /// Rows of the current decode step.
    pub fn set_batch(&self, n: usize) {
        self.batch_size.store(n as u64, Ordering::Relaxed);
    }

    /// A decode step of `rows` rows took `time`.
    pub fn step(&self, rows: usize, time: Duration) {
        add(&self.step_micros_sum, time.as_micros() as u64);
        add(&self.step_rows_sum, rows as u64);
        let rate = rows as f64 / time.as_secs_f64().max(1e-9);
        self.step_rate_milli
            .store((rate * 1e3) as u64, Ordering::Relaxed);
    }

    /// The Prometheus text.
    pub fn render(&self, queue_depth: usize) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        };
        metric(
            "df11_requests_total",
            "counter",
            "Requests to the generation endpoints.",
            get(&self.requests).to_string(),
        );
        metric(
            "df11_requests_rejected_total",
            "counter",
            "Requests answered with a 4xx before the model.",
            get(&self.rejected).to_string(),
        );
        metric(
            "df11_requests_failed_total",
            "counter",
            "Requests the model failed on.",
            get(&self.failed).to_string(),
        );
        metric(
            "df11_requests_cancelled_total",
            "counter",
            "Requests whose client went away.",
            get(&self.cancelled).to_string(),
        );
        metric(
            "df11_requests_completed_total",
            "counter",
            "Requests that ended normally.",
            get(&self.completed).to_string(),
        );
        metric(
            "df11_prompt_tokens_total",
            "counter",
            "Prompt tokens prefilled.",
            get(&self.prompt_tokens).to_string(),
        );
        metric(
            "df11_generated_tokens_total",
            "counter",
            "Tokens generated.",
            get(&self.generated_tokens).to_string(),
        );
        metric(
            "df11_queue_depth",
            "gauge",
            "Requests waiting for a sequence slot.",
            queue_depth.to_string(),
        );
        metric(
            "df11_batch_size",
            "gauge",
            "Sequences in the last decode step.",
            get(&self.batch_size).to_string(),
        );
        metric(
            "df11_time_to_first_token_seconds_sum",
            "counter",
            "Sum of the times from request to first token.",
            format!("{:.6}", get(&self.ttft_micros_sum) as f64 / 1e6),
        );
        metric(
            "df11_time_to_first_token_seconds_count",
            "counter",
            "Requests with a first token.",
            get(&self.ttft_count).to_string(),
        );
        metric(
            "df11_decode_step_seconds_sum",
            "counter",
            "Time spent in decode steps.",
            format!("{:.6}", get(&self.step_micros_sum) as f64 / 1e6),
        );
        metric(
            "df11_decode_step_rows_total",
            "counter",
            "Rows decoded (one token each).",
            get(&self.step_rows_sum).to_string(),
        );
        metric(
            "df11_decode_tokens_per_second",
            "gauge",
            "Tokens per second of the last decode step.",
            format!("{:.3}", get(&self.step_rate_milli) as f64 / 1e3),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.request();
        m.prompt(7, Duration::from_millis(20));
        m.done(3);
        m.step(2, Duration::from_millis(10));
        let text = m.render(4);
        for line in [
            "df11_requests_total 1",
            "df11_prompt_tokens_total 7",
            "df11_generated_tokens_total 3",
            "df11_queue_depth 4",
            "df11_time_to_first_token_seconds_sum 0.020000",
            "df11_decode_tokens_per_second 200.000",
            "# TYPE df11_batch_size gauge",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
