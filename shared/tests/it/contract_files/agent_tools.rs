//! The agent's tools (`koe::domain::agent::tools::TOOLS`) and `openapi.yaml`: every tool, and no
//! other, is a plan step's `tool` and has its round-2 result schema, with the code's list name,
//! item cap, fields, required fields and caps. A tool added to the code without its contract
//! (or the contract's without the code) fails here.

use std::collections::BTreeSet;

use koe::domain::agent::MAX_DATETIME_CHARS;
use koe::domain::agent::tools::{Kind, TOOLS, Tool};
use koe_testkit::template::load_yaml;
use serde_norway::Value;

fn schema<'a>(openapi: &'a Value, reference: &Value) -> &'a Value {
    let name = reference
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .unwrap_or_else(|| panic!("a schema $ref: {reference:?}"));
    &openapi["components"]["schemas"][name]
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn names(tools: &[&Tool]) -> BTreeSet<String> {
    tools.iter().map(|t| t.name.to_owned()).collect()
}

/// The result schema of `tool` against its definition; `Err` names the first difference.
fn check_result(openapi: &Value, tool: &Tool, result: &Value) -> Result<(), String> {
    let name = tool.name;
    let differ = |what: &str| Err(format!("{name}: {what}"));
    if result["properties"]["tool"]["const"].as_str() != Some(name) {
        return differ("properties.tool.const is not the tool's name");
    }
    if !strings(&result["required"])
        .is_superset(&["stepId", "tool", "output"].map(String::from).into())
    {
        return differ("required lacks stepId, tool or output");
    }
    // Inline or a schema of its own (`CalendarOutput`: inline, openapi-python-client makes two
    // models of one name and drops the tool's schemas).
    let output = &result["properties"]["output"];
    let output = match output.get("$ref") {
        Some(reference) => schema(openapi, reference),
        None => output,
    };
    if strings(&output["required"]) != BTreeSet::from([tool.list.to_owned()]) {
        return differ(&format!("output.required is not [{}]", tool.list));
    }
    let list = &output["properties"][tool.list];
    if list["maxItems"].as_u64() != Some(tool.max_items as u64) {
        return differ(&format!(
            "output.{}.maxItems is not {}",
            tool.list, tool.max_items
        ));
    }
    let item = schema(openapi, &list["items"]["$ref"]);
    let fields: BTreeSet<String> = tool.item.iter().map(|f| f.name.to_owned()).collect();
    let documented: BTreeSet<String> = item["properties"]
        .as_mapping()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.as_str().map(str::to_owned))
        .collect();
    if documented != fields {
        return differ(&format!(
            "item fields {documented:?}, the code's {fields:?}"
        ));
    }
    let required: BTreeSet<String> = tool
        .item
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name.to_owned())
        .collect();
    if strings(&item["required"]) != required {
        return differ(&format!("item required is not {required:?}"));
    }
    if tool.item.iter().any(|f| f.personal)
        && !item["description"]
            .as_str()
            .is_some_and(|d| d.contains("Never logged"))
    {
        return differ("the item's description does not say its data is never logged");
    }
    for field in tool.item {
        let property = &item["properties"][field.name];
        let types = match &property["type"] {
            Value::String(one) => BTreeSet::from([one.clone()]),
            many => strings(many),
        };
        let (kind, max) = match field.kind {
            Kind::Text(max) => ("string", Some(max)),
            Kind::DateTime => ("string", Some(MAX_DATETIME_CHARS)),
            Kind::Bool => ("boolean", None),
        };
        let mut expected = BTreeSet::from([kind.to_owned()]);
        if !field.required {
            expected.insert("null".to_owned());
        }
        if types != expected {
            return differ(&format!(
                "{} has type {types:?}, not {expected:?}",
                field.name
            ));
        }
        if property["maxLength"].as_u64() != max.map(|m| m as u64) {
            return differ(&format!("{}.maxLength is not {max:?}", field.name));
        }
        let is_date = property["format"].as_str() == Some("date-time");
        if is_date != (field.kind == Kind::DateTime) {
            return differ(&format!(
                "{}: format date-time only for a date-time",
                field.name
            ));
        }
    }
    Ok(())
}

/// Each tool's result schema in the contract (`AgentStepResult`'s discriminator), and the
/// plan step's tool enum.
fn check(openapi: &Value, tools: &[&Tool]) -> Result<(), String> {
    let schemas = &openapi["components"]["schemas"];
    let step = &schemas["AgentStepResult"];
    if step["discriminator"]["propertyName"].as_str() != Some("tool") {
        return Err("AgentStepResult is told apart by `tool`".into());
    }
    let mapping = step["discriminator"]["mapping"]
        .as_mapping()
        .ok_or("AgentStepResult.discriminator.mapping")?;
    let mapped: BTreeSet<String> = mapping
        .keys()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    if mapped != names(tools) {
        return Err(format!(
            "AgentStepResult maps {mapped:?}, the code's tools are {:?}",
            names(tools)
        ));
    }
    let one_of: BTreeSet<String> = step["oneOf"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|r| r["$ref"].as_str().map(str::to_owned))
        .collect();
    let targets: BTreeSet<String> = mapping
        .values()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    if one_of != targets {
        return Err("AgentStepResult.oneOf is not the mapping's schemas".into());
    }
    for tool in tools {
        check_result(openapi, tool, schema(openapi, &mapping[tool.name]))?;
    }
    let planned = strings(&schemas["AgentPlanStep"]["properties"]["tool"]["enum"]);
    if planned != names(tools) {
        return Err(format!("AgentPlanStep.tool.enum is {planned:?}"));
    }
    Ok(())
}

#[test]
fn openapi_documents_every_agent_tool_as_the_code_defines_it() {
    if let Err(difference) = check(&load_yaml("openapi.yaml"), TOOLS) {
        panic!("openapi.yaml and the agent's tools differ: {difference}");
    }
}

#[test]
fn a_tool_the_contract_lacks_or_documents_otherwise_is_found() {
    let openapi = load_yaml("openapi.yaml");
    const EXTRA: Tool = Tool {
        name: "mail",
        ..koe::domain::agent::tools::calendar::CALENDAR
    };
    let mut tools = TOOLS.to_vec();
    tools.push(&EXTRA);
    assert!(check(&openapi, &tools).unwrap_err().contains("mail"));
    const FEWER: Tool = Tool {
        max_items: 199,
        ..koe::domain::agent::tools::calendar::CALENDAR
    };
    let tools: Vec<&Tool> = TOOLS
        .iter()
        .map(|t| if t.name == FEWER.name { &FEWER } else { *t })
        .collect();
    assert!(check(&openapi, &tools).unwrap_err().contains("maxItems"));
}
