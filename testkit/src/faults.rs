//! The fault table: each fault-injection test (`shared/tests/faults_*.rs`) reports one row per
//! fault, `fault → expected behaviour → observed`, once it has checked the behaviour.
//! `scripts/fault-table.sh` collects the rows from the test output and prints them as one table
//! at the end of `scripts/test.sh`.
//!
//! A row is one line on the process's real standard output, written past the test harness's
//! capture (which only takes `print!`), so it reaches the log of a passing test too:
//! `FAULT-TABLE<TAB>fault<TAB>expected<TAB>observed`.

use std::io::Write;

/// Starts every row line.
pub const MARKER: &str = "FAULT-TABLE";

/// Reports one row of the fault table; under the gateway front (`KOE_TEST_FRONT=lambda`) the
/// fault is marked `[lambda front]`, so that the run of both fronts keeps the rows apart.
pub fn record(fault: &str, expected: &str, observed: &str) {
    let clean = |text: &str| text.replace(['\t', '\n', '\r'], " ");
    let fault = match crate::harness::front() {
        crate::harness::Front::Local => fault.to_owned(),
        crate::harness::Front::Lambda => format!("{fault} [lambda front]"),
    };
    let line = format!(
        "{MARKER}\t{}\t{}\t{}\n",
        clean(&fault),
        clean(expected),
        clean(observed)
    );
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(line.as_bytes());
    let _ = stdout.flush();
}
