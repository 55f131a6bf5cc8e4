//! The `calendar` tool: the device reads the events of the user's calendar in a range.

use super::{Args, Field, Kind, Tool};

/// Most events in one result.
pub const MAX_EVENTS: usize = 200;
pub const MAX_TITLE_CHARS: usize = 200;

pub const CALENDAR: Tool = Tool {
    name: "calendar",
    args: Args::Range,
    planner: "reads the events of the user's device calendar between `from` and `to`. Use it \
              when the message is about their schedule, plans, appointments or free time.",
    responder: "mention at most about three events, the most relevant first, and never invent \
                events.",
    list: "events",
    max_items: MAX_EVENTS,
    item: &[
        Field::new("title", Kind::Text(MAX_TITLE_CHARS)).personal(),
        Field::new("start", Kind::DateTime).personal(),
        Field::new("end", Kind::DateTime).personal(),
        Field::new("allDay", Kind::Bool).optional(),
    ],
};
