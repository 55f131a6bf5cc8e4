//! The command line: calls, spike, parts, held replies, output files.

use std::path::PathBuf;

#[derive(Clone)]
pub(super) struct Args {
    pub(super) calls: usize,
    pub(super) spike: bool,
    pub(super) calls_per_worker: u32,
    pub(super) csv: Option<String>,
    /// Held replies: the probability, how long, and the window (ms around the second).
    pub(super) held: f64,
    pub(super) hold_ms: u64,
    pub(super) window_ms: (i64, i64),
    /// `DISPATCH_STORE_CONCURRENCY` for every process, instead of each role's default.
    pub(super) store_concurrency: Option<usize>,
    /// Worker mode: this part, the second the calls start at (epoch ms), where to write.
    pub(super) part: Option<(u32, u32)>,
    pub(super) t0_ms: Option<i64>,
    pub(super) out: Option<PathBuf>,
}

pub(super) fn args() -> Args {
    let mut args = Args {
        calls: 10_000,
        spike: false,
        calls_per_worker: 5_000,
        csv: None,
        held: 0.0,
        hold_ms: 1500,
        window_ms: (-1500, 3500),
        store_concurrency: None,
        part: None,
        t0_ms: None,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    let number = |it: &mut std::iter::Skip<std::env::Args>, name: &str| -> i64 {
        it.next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} N"))
    };
    let mut of = None;
    let mut index = None;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--calls" => args.calls = number(&mut it, "--calls") as usize,
            "--spike" => args.spike = true,
            "--calls-per-worker" => {
                args.calls_per_worker = number(&mut it, "--calls-per-worker") as u32
            }
            "--csv" => args.csv = it.next(),
            "--held" => {
                args.held = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--held F (0 to 1)")
            }
            "--hold-ms" => args.hold_ms = number(&mut it, "--hold-ms") as u64,
            "--window-ms" => {
                let window = it.next().expect("--window-ms FROM,UNTIL");
                let (from, until) = window.split_once(',').expect("--window-ms FROM,UNTIL");
                args.window_ms = (
                    from.parse().expect("--window-ms FROM"),
                    until.parse().expect("--window-ms UNTIL"),
                );
            }
            "--store-concurrency" => {
                args.store_concurrency = Some(number(&mut it, "--store-concurrency") as usize)
            }
            "--part" => index = Some(number(&mut it, "--part") as u32),
            "--of" => of = Some(number(&mut it, "--of") as u32),
            "--t0-ms" => args.t0_ms = Some(number(&mut it, "--t0-ms")),
            "--out" => args.out = it.next().map(PathBuf::from),
            other => panic!("unknown argument {other}"),
        }
    }
    args.part = index.zip(of);
    args
}
