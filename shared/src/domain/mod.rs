//! Domain types. Each is made only by parsing, so a value that exists is valid.

pub mod agent;
pub mod chat;
pub mod device;
pub mod due;
pub mod fields;
pub mod reservation;
pub mod sentences;
pub mod usage_day;

/// Why a value was refused: the field at fault and the rule it broke (never the value itself).
/// `handlers` turns it into a 400 INVALID_REQUEST whose message is `"{field} {problem}"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct Invalid {
    pub field: String,
    pub problem: String,
}

impl Invalid {
    pub fn new(field: impl std::fmt::Display, problem: impl std::fmt::Display) -> Invalid {
        Invalid {
            field: field.to_string(),
            problem: problem.to_string(),
        }
    }
}

/// `bytes` as lowercase hex digits, two a byte.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` random bytes from the operating system's generator, as `2 * N` hex digits.
fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    getrandom::getrandom(&mut bytes).expect("the operating system's random generator works");
    hex(&bytes)
}
