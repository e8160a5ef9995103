//! The server's counters, served at `GET /metrics` in Prometheus' text format.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the time-to-first-token histogram's buckets.
const TTFT_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

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
    /// Requests whose first token came within each bucket's bound (not cumulative).
    ttft_buckets: [AtomicU64; TTFT_BUCKETS.len()],
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
        let secs = ttft.as_secs_f64();
        if let Some(b) = TTFT_BUCKETS.iter().position(|&le| secs <= le) {
            add(&self.ttft_buckets[b], 1);
        }
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
        let counters = [
            &self.requests,
            &self.rejected,
            &self.failed,
            &self.cancelled,
            &self.completed,
            &self.prompt_tokens,
            &self.generated_tokens,
            &self.step_rows_sum,
        ];
        let mut rows: Vec<(&str, &str, &str, String)> = COUNTERS
            .iter()
            .zip(counters)
            .map(|((name, help), c)| (*name, "counter", *help, get(c).to_string()))
            .collect();
        let step_s = get(&self.step_micros_sum) as f64 / 1e6;
        let rate = get(&self.step_rate_milli) as f64 / 1e3;
        let ttft_mean =
            get(&self.ttft_micros_sum) as f64 / 1e6 / get(&self.ttft_count).max(1) as f64;
        rows.extend([
            (
                "df11_decode_step_seconds_sum",
                "counter",
                "Time spent in decode steps.",
                format!("{step_s:.6}"),
            ),
            (
                "df11_queue_depth",
                "gauge",
                "Requests waiting for a sequence slot.",
                queue_depth.to_string(),
            ),
            (
                "df11_batch_size",
                "gauge",
                "Sequences in the last decode step.",
                get(&self.batch_size).to_string(),
            ),
            (
                "df11_decode_tokens_per_second",
                "gauge",
                "Tokens per second of the last decode step.",
                format!("{rate:.3}"),
            ),
            (
                "df11_time_to_first_token_seconds_mean",
                "gauge",
                "Mean time to the first token.",
                format!("{ttft_mean:.6}"),
            ),
        ]);
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
        // A Prometheus histogram: cumulative buckets, then the sum and the count.
        let name = "df11_time_to_first_token_seconds";
        out.push_str(&format!(
            "# HELP {name} From a request's arrival to its first token.\n# TYPE {name} histogram\n"
        ));
        let mut cumulative = 0;
        for (le, b) in TTFT_BUCKETS.iter().zip(&self.ttft_buckets) {
            cumulative += get(b);
            out.push_str(&format!("{name}_bucket{{le=\"{le}\"}} {cumulative}\n"));
        }
        let count = get(&self.ttft_count);
        let sum = get(&self.ttft_micros_sum) as f64 / 1e6;
        out.push_str(&format!(
            "{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum:.6}\n{name}_count {count}\n"
        ));
        out
    }
}

/// The counters' names and help, in the order `render` lists their values.
const COUNTERS: [(&str, &str); 8] = [
    (
        "df11_requests_total",
        "Requests to the generation endpoints.",
    ),
    (
        "df11_requests_rejected_total",
        "Requests answered with a 4xx before the model.",
    ),
    (
        "df11_requests_failed_total",
        "Requests the model failed on.",
    ),
    (
        "df11_requests_cancelled_total",
        "Requests whose client went away.",
    ),
    (
        "df11_requests_completed_total",
        "Requests that ended normally.",
    ),
    ("df11_prompt_tokens_total", "Prompt tokens prefilled."),
    ("df11_generated_tokens_total", "Tokens generated."),
    (
        "df11_decode_step_rows_total",
        "Rows decoded (one token each).",
    ),
];

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
            "df11_time_to_first_token_seconds_bucket{le=\"0.01\"} 0",
            "df11_time_to_first_token_seconds_bucket{le=\"0.025\"} 1",
            "df11_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
            "df11_decode_tokens_per_second 200.000",
            "# TYPE df11_batch_size gauge",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
