//! The tools the device can run for agent mode, one definition each and [`TOOLS`] the one list.
//!
//! A tool says its name, its arguments, the array its output holds and each item's fields
//! (kind, caps, whether required, whether personal), and the words the planner and the
//! responder get about it. Round 1's `capabilities`, the planner's schema and prompt, round 2's
//! parser, the responder's prompt, the body cap (`agent::api::AGENT_BODY_LIMIT`), the log audit
//! and the openapi contract test all read [`TOOLS`]: adding a tool is its file here and its line
//! in the list (docs/architecture.md, "Add an agent tool").

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

pub mod calendar;

/// Every tool, in the order the planner is told about them.
pub const TOOLS: &[&Tool] = &[&calendar::CALENDAR];

/// One tool the device can run: what the server knows of it.
#[derive(Debug)]
pub struct Tool {
    /// Its name in `capabilities` and in a step's and a result's `tool`.
    pub name: &'static str,
    pub args: Args,
    /// What the planner is told, after `- <name>: `: what it reads and when to plan it.
    pub planner: &'static str,
    /// What the responder is told about answering from its results, after `<name> results: `.
    pub responder: &'static str,
    /// The array its output holds (`output.<list>`), at most `max_items` items of `item`.
    pub list: &'static str,
    pub max_items: usize,
    pub item: &'static [Field],
}

/// A plan step's arguments. A tool with other arguments adds a kind here, with its schema in the
/// planner and its check in the planner's output check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Args {
    /// `{from, to}`: RFC 3339 date-times, `from` before `to`.
    Range,
}

/// One field of an output item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    /// Absent or `null` is refused; otherwise it reads as `false` (a boolean) or `null`.
    pub required: bool,
    /// The user's data (a title, a time): never logged, never echoed in an error. The log audit
    /// plants sentinels in every personal field of every tool.
    pub personal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string of 0 to this many characters.
    Text(usize),
    /// An RFC 3339 date-time with an offset (`domain::agent::MAX_DATETIME_CHARS` at most),
    /// passed on as the device wrote it, fractions and `Z` normalized.
    DateTime,
    Bool,
}

impl Field {
    /// A required field that is not personal.
    pub const fn new(name: &'static str, kind: Kind) -> Field {
        Field {
            name,
            kind,
            required: true,
            personal: false,
        }
    }

    pub const fn optional(self) -> Field {
        Field {
            required: false,
            ..self
        }
    }

    pub const fn personal(self) -> Field {
        Field {
            personal: true,
            ..self
        }
    }

    /// What an absent optional field reads as.
    pub fn absent(&self) -> Value {
        match self.kind {
            Kind::Bool => Value::Bool(false),
            Kind::Text(_) | Kind::DateTime => Value::Null,
        }
    }
}

/// A tool the client listed in `capabilities` (unknown names are ignored, so an older server
/// keeps working with a newer app), or that a step or result names.
#[derive(Clone, Copy)]
pub struct Capability(&'static Tool);

impl Capability {
    pub fn all() -> impl Iterator<Item = Capability> {
        TOOLS.iter().map(|tool| Capability(tool))
    }

    pub const fn of(tool: &'static Tool) -> Capability {
        Capability(tool)
    }

    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::all().find(|c| c.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        self.0.name
    }

    pub fn tool(self) -> &'static Tool {
        self.0
    }

    /// `calendar, ...` for error messages.
    pub fn names() -> String {
        Capability::all()
            .map(Capability::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl PartialEq for Capability {
    fn eq(&self, other: &Capability) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Capability {}

impl std::hash::Hash for Capability {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl std::fmt::Debug for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Capability {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What one step's tool read, checked against its definition: each item's values in the order
/// of the tool's `item` fields. Serializes as `{"tool": name, "<list>": [{field: value}]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub tool: Capability,
    pub items: Vec<Vec<Value>>,
}

impl ToolOutput {
    pub fn empty(tool: Capability) -> ToolOutput {
        ToolOutput {
            tool,
            items: Vec::new(),
        }
    }

    /// The value of field `name` in item `index`.
    pub fn value(&self, index: usize, name: &str) -> Option<&Value> {
        let at = self.tool.tool().item.iter().position(|f| f.name == name)?;
        self.items.get(index)?.get(at)
    }
}

struct ItemView<'a>(&'static [Field], &'a [Value]);

impl Serialize for ItemView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (field, value) in self.0.iter().zip(self.1) {
            map.serialize_entry(field.name, value)?;
        }
        map.end()
    }
}

impl Serialize for ToolOutput {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let tool = self.tool.tool();
        let items: Vec<ItemView<'_>> = self
            .items
            .iter()
            .map(|values| ItemView(tool.item, values))
            .collect();
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("tool", tool.name)?;
        map.serialize_entry(tool.list, &items)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_lowercase_and_fields_are_named_once() {
        let mut names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), TOOLS.len());
        for tool in TOOLS {
            assert!(
                tool.name.chars().all(|c| c.is_ascii_lowercase()),
                "{}",
                tool.name
            );
            let mut fields: Vec<&str> = tool.item.iter().map(|f| f.name).collect();
            fields.sort();
            fields.dedup();
            assert_eq!(fields.len(), tool.item.len(), "{}", tool.name);
            assert!(tool.max_items > 0 && !tool.planner.is_empty() && !tool.responder.is_empty());
        }
    }
}
