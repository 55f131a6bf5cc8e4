//! Parsing POST /agent's body: round 1 or round 2, each field checked, each rule naming its field.

use chrono::{DateTime, FixedOffset, SecondsFormat};
use chrono_tz::Tz;
use serde_json::{Map, Value};

use super::tools::{Capability, Field, Kind, Tool, ToolOutput};
use super::{
    AgentRequest, DEFAULT_TIMEZONE, MAX_DATETIME_CHARS, MAX_MESSAGE_CHARS, MAX_STEP_ID_CHARS,
    MAX_STEPS, Round1, Round2, StepResult,
};
use crate::domain::Invalid;
use crate::domain::device::DeviceId;
use crate::domain::fields::Fields;

/// An RFC 3339 date-time with an offset, as the value of the field named `field`.
pub fn parse_rfc3339(field: &str, raw: &str) -> Result<DateTime<FixedOffset>, Invalid> {
    let parsed = if raw.len() > MAX_DATETIME_CHARS {
        None
    } else {
        DateTime::parse_from_rfc3339(raw).ok()
    };
    parsed.ok_or_else(|| {
        Invalid::new(
            field,
            "must be an RFC 3339 date-time with an offset, e.g. 2026-01-02T10:00:00+09:00",
        )
    })
}

fn parse_timezone(fields: &Fields<'_>) -> Result<Tz, Invalid> {
    match fields.optional_str("timezone")? {
        None => Ok(DEFAULT_TIMEZONE),
        Some(name) => name.parse::<Tz>().map_err(|_| {
            Invalid::new(
                "timezone",
                "must be an IANA time zone name, e.g. Asia/Tokyo",
            )
        }),
    }
}

fn parse_capabilities(fields: &Fields<'_>) -> Result<Vec<Capability>, Invalid> {
    let mut capabilities = Vec::new();
    for (i, item) in fields.required_array("capabilities")?.iter().enumerate() {
        let name = item
            .as_str()
            .ok_or_else(|| Invalid::new(format!("capabilities[{i}]"), "must be a string"))?;
        if let Some(capability) = Capability::from_name(name)
            && !capabilities.contains(&capability)
        {
            capabilities.push(capability);
        }
    }
    Ok(capabilities)
}

/// One field of an output item, as its tool defines it; dates are passed on normalized
/// (fractions as needed, `Z` for UTC), so the responder sees one form.
fn parse_field(item: &Fields<'_>, field: &Field) -> Result<Value, Invalid> {
    let name = field.name;
    if !field.required && item.optional(name).is_none() {
        return Ok(field.absent());
    }
    Ok(match field.kind {
        Kind::Text(max) => Value::from(item.required_text(name, 0, max)?),
        Kind::DateTime => {
            let at = parse_rfc3339(&item.name(name), item.required_str(name)?)?;
            Value::from(at.to_rfc3339_opts(SecondsFormat::AutoSi, true))
        }
        Kind::Bool => Value::from(
            item.optional_bool(name)?
                .ok_or_else(|| Invalid::new(item.name(name), "is required"))?,
        ),
    })
}

/// A result's `output`: the tool's array, at most its `max_items` items of its fields.
fn parse_output(tool: &Tool, output: &Fields<'_>) -> Result<Vec<Vec<Value>>, Invalid> {
    let items = output.required_array(tool.list)?;
    if items.len() > tool.max_items {
        return Err(Invalid::new(
            output.name(tool.list),
            format!("must have at most {} items", tool.max_items),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let item = Fields::nested(item, format!("{}[{i}]", output.name(tool.list)))?;
            tool.item.iter().map(|f| parse_field(&item, f)).collect()
        })
        .collect()
}

fn parse_result(result: &Fields<'_>) -> Result<StepResult, Invalid> {
    let step_id = result
        .required_text("stepId", 1, MAX_STEP_ID_CHARS)?
        .to_owned();
    let tool = result.required_str("tool")?;
    let tool = Capability::from_name(tool).ok_or_else(|| {
        Invalid::new(
            result.name("tool"),
            format!("must be one of {}", Capability::names()),
        )
    })?;
    let output = Fields::nested(result.required("output")?, result.name("output"))?;
    let output = ToolOutput {
        tool,
        items: parse_output(tool.tool(), &output)?,
    };
    Ok(StepResult { step_id, output })
}

impl AgentRequest {
    pub fn parse(body: &Map<String, Value>) -> Result<AgentRequest, Invalid> {
        let fields = Fields::root(body);
        let message = fields
            .required_text("message", 1, MAX_MESSAGE_CHARS)?
            .to_owned();

        let Some(items) = fields.optional_array("results")? else {
            let capabilities = parse_capabilities(&fields)?;
            let device_id = DeviceId::parse("deviceId", fields.required_str("deviceId")?)?;
            let timezone = parse_timezone(&fields)?;
            return Ok(AgentRequest::Round1(Round1 {
                message,
                capabilities,
                device_id,
                timezone,
            }));
        };

        if items.len() > MAX_STEPS {
            return Err(Invalid::new(
                "results",
                format!("must have at most {MAX_STEPS} items (one per plan step)"),
            ));
        }
        let results = items
            .iter()
            .enumerate()
            .map(|(i, item)| parse_result(&Fields::nested(item, format!("results[{i}]"))?))
            .collect::<Result<_, _>>()?;
        let device_id = DeviceId::parse("deviceId", fields.required_str("deviceId")?)?;
        let timezone = parse_timezone(&fields)?;
        Ok(AgentRequest::Round2(Round2 {
            message,
            results,
            device_id,
            timezone,
        }))
    }
}
