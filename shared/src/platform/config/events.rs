//! The notification bus's section: the EventBridge bus name (`EVENT_BUS_NAME`).

use super::Vars;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventsConfig {
    /// The EventBridge bus for error notifications (and the dispatcher's requested runs); unset
    /// means notifications are only logged.
    pub bus_name: Option<String>,
}

impl EventsConfig {
    /// `EVENT_BUS_NAME`. Any value is a name, so this cannot fail.
    pub fn from_vars(vars: &Vars) -> EventsConfig {
        EventsConfig {
            bus_name: vars.get("EVENT_BUS_NAME"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::config::testing::reads_only;

    #[test]
    fn the_bus_is_optional() {
        assert_eq!(
            EventsConfig::from_vars(&Vars::from_pairs(&[("EVENT_BUS_NAME", "")])),
            EventsConfig::default()
        );
        let events = EventsConfig::from_vars(&Vars::from_pairs(&[("EVENT_BUS_NAME", "koe")]));
        assert_eq!(events.bus_name.as_deref(), Some("koe"));
    }

    #[test]
    fn reads_only_its_own_variables() {
        assert_eq!(
            reads_only(&["EVENT_BUS_NAME"], EventsConfig::from_vars),
            EventsConfig::default()
        );
    }
}
