//! The scheduler's shutdown (on the CPU, with a fixture model): `Scheduler::shutdown` stops the
//! loop and joins its thread, so the model is gone before it returns; requests still running or
//! queued are told so and released; later submissions are refused; dropping the last handle
//! does the same. Process exits that depend on this are checked end to end in `interrupt.rs`
//! and, on the GPU, by scripts/gpu-exit-check.sh.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use df11_llm::serving::{Event, Metrics, Request, Scheduler, SubmitError};
use df11_llm::testing::model_dir;
use df11_llm::{load_any, ArchInfo, ModelArgs, SamplingParams};

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    model: ModelArgs,
}

fn start(max_batch: usize) -> Scheduler {
    let dir = model_dir("qwen3-tiny", "df11");
    let args = Args::parse_from(["test", "--cpu", "--model-dir", dir.to_str().unwrap()]);
    let archs = vec![ArchInfo::of::<qwen3_df11::Qwen3Arch>()];
    let opts = args
        .model
        .load_options(archs[0].default_repo, false, &Default::default())
        .unwrap();
    let (scheduler, _) = Scheduler::start(
        // No end-of-sequence token: a request runs until the context is full.
        Box::new(move || {
            load_any(&archs, &opts).map(|(_, mut loaded)| {
                loaded.defaults.eos_token_ids.clear();
                loaded
            })
        }),
        max_batch,
        4,
        Arc::new(Metrics::default()),
    )
    .unwrap();
    scheduler
}

/// A request that generates until the context is full; its events arrive on the receiver.
fn long_request() -> (Request, mpsc::Receiver<Event>) {
    let (tx, rx) = mpsc::channel();
    let request = Request {
        prompt: vec![1, 2, 3, 4],
        max_tokens: None,
        sampling: SamplingParams::greedy(),
        stop: Vec::new(),
        events: Box::new(tx),
        received: Instant::now(),
    };
    (request, rx)
}

/// Every event already sent, which must end with the sender dropped: called once a shutdown
/// has returned, when the thread has let go of every request (no waiting here: a request
/// still held, as by a thread that is still winding down, fails the test).
fn until_released(rx: &mpsc::Receiver<Event>) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(e) => events.push(e),
            Err(mpsc::TryRecvError::Disconnected) => return events,
            Err(mpsc::TryRecvError::Empty) => {
                panic!("the request is still held after the shutdown returned: {events:?}")
            }
        }
    }
}

fn ended_by_shutdown(events: &[Event]) -> bool {
    matches!(events.last(), Some(Event::Failed(m)) if m.contains("shutting down"))
}

#[test]
fn shutdown_releases_every_request_and_refuses_new_ones() {
    let scheduler = start(1);
    let (running, running_rx) = long_request();
    scheduler.submit(running).unwrap();
    // The first request is generating (its first text has arrived) ...
    let first = running_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the first request's first event");
    assert!(matches!(first, Event::Text(_)), "{first:?}");
    // ... and with one slot the second one waits in the queue behind it.
    let (queued, queued_rx) = long_request();
    scheduler.submit(queued).unwrap();
    let handle = scheduler.clone();
    scheduler.shutdown();

    // Both were released by the time shutdown returned: their senders are gone, so the events
    // end (no wait for a timeout), and the last one says why.
    let running_events = until_released(&running_rx);
    let queued_events = until_released(&queued_rx);
    assert!(
        ended_by_shutdown(&running_events)
            || matches!(running_events.last(), Some(Event::Done { .. })),
        "{running_events:?}"
    );
    assert!(
        ended_by_shutdown(&queued_events) || queued_events.is_empty(),
        "a queued request never started: {queued_events:?}"
    );
    assert!(
        !queued_events.iter().any(|e| matches!(e, Event::Text(_))),
        "{queued_events:?}"
    );

    // Every handle refuses new work now, and shutting down again returns at once.
    let (late, late_rx) = long_request();
    assert_eq!(handle.submit(late).err(), Some(SubmitError::Stopped));
    assert!(until_released(&late_rx).is_empty());
    let again = Instant::now();
    handle.shutdown();
    assert!(again.elapsed() < Duration::from_secs(5));
}

#[test]
fn dropping_the_last_handle_stops_the_scheduler() {
    let scheduler = start(2);
    let (running, running_rx) = long_request();
    scheduler.submit(running).unwrap();
    let first = running_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the first event");
    assert!(matches!(first, Event::Text(_)), "{first:?}");
    let other = scheduler.clone();
    drop(scheduler);
    // One handle is left: the request keeps running.
    assert!(matches!(
        running_rx.recv_timeout(Duration::from_secs(60)),
        Ok(Event::Text(_))
    ));
    // The last one goes: the thread is joined, the request released.
    drop(other);
    let events = until_released(&running_rx);
    assert!(
        ended_by_shutdown(&events) || matches!(events.last(), Some(Event::Done { .. })),
        "{events:?}"
    );
}
