//! Gateway throttles: none on the chat API, the agent API's never below the floor.

use koe::Api;
use koe_testkit::template::load_yaml;
use serde_norway::Value;

/// The lowest gateway request rate (per second) either API may be throttled to: far above launch
/// traffic, so a throttle is only a stop against floods. The chat API sets none at all.
const THROTTLE_RATE_FLOOR: f64 = 100.0;

/// A number in the template, or the `MinValue` (the lowest a deploy can set) of the parameter
/// it refers to, whose `Default` must also be at least that.
fn lowest_number(template: &Value, value: &Value) -> f64 {
    if let Value::Tagged(tagged) = value {
        assert_eq!(tagged.tag.to_string(), "!Ref", "{value:?}");
        let name = tagged.value.as_str().expect("!Ref name");
        let parameter = &template["Parameters"][name];
        let min = parameter["MinValue"]
            .as_f64()
            .unwrap_or_else(|| panic!("parameter {name} has no MinValue"));
        let default = parameter["Default"].as_f64().expect("Default");
        assert!(default >= min, "{name}: Default below MinValue");
        return min;
    }
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value:?}"))
}

/// Chat is limited by the chat function's reserved concurrency (the interface: "automatic,
/// through the runtime's concurrency limit; no explicit per-client rate"), so the chat API
/// sets no gateway throttle; the agent API's throttle, on any route or stage, is never below
/// the floor.
#[test]
fn gateway_throttles_stay_off_chat_and_above_the_floor_on_agent() {
    let template = load_yaml("template.yaml");
    let resources = template["Resources"].as_mapping().unwrap();
    let mut apis = 0;
    for (id, resource) in resources {
        let id = id.as_str().unwrap();
        let kind = resource["Type"].as_str().unwrap_or_default();
        if kind != "AWS::Serverless::HttpApi" && !kind.starts_with("AWS::ApiGatewayV2::") {
            continue;
        }
        apis += 1;
        let props = &resource["Properties"];
        let mut settings: Vec<&Value> = vec![&props["DefaultRouteSettings"]];
        if let Some(routes) = props["RouteSettings"].as_mapping() {
            settings.extend(routes.values());
        }
        if let Some(stage) = props["StageSettings"].as_mapping() {
            settings.push(&stage["DefaultRouteSettings"]);
            if let Some(routes) = stage.get("RouteSettings").and_then(Value::as_mapping) {
                settings.extend(routes.values());
            }
        }
        for s in settings {
            for key in ["ThrottlingRateLimit", "ThrottlingBurstLimit"] {
                let Some(value) = s.get(key) else { continue };
                assert_ne!(
                    id,
                    Api::Chat.template_id(),
                    "the chat API sets no gateway throttle ({key})"
                );
                let lowest = lowest_number(&template, value);
                assert!(
                    lowest >= THROTTLE_RATE_FLOOR,
                    "{id} {key} can be {lowest}, below the floor of {THROTTLE_RATE_FLOOR}/s"
                );
            }
        }
    }
    assert!(apis >= 2, "both HTTP APIs were looked at");

    let chat = &template["Resources"]["ChatFunction"]["Properties"];
    let reserved = &chat["ReservedConcurrentExecutions"];
    // `!If [Reserves, !Ref <parameter>, !Ref AWS::NoValue]`: ReserveConcurrency=false drops it.
    let Value::Tagged(choice) = reserved else {
        panic!("ChatFunction's ReservedConcurrentExecutions is an !If: {reserved:?}")
    };
    let Value::Tagged(tagged) = &choice.value.as_sequence().unwrap()[1] else {
        panic!("ChatFunction's reservation is a !Ref to a parameter: {reserved:?}")
    };
    let name = tagged.value.as_str().unwrap();
    let parameter = &template["Parameters"][name];
    assert_eq!(parameter["Type"].as_str(), Some("Number"), "{name}");
    let default = parameter["Default"].as_u64().expect("a default");
    assert!(
        (1..=900).contains(&default),
        "{name} default {default}: at least 1, and at most 900 so 100 stay unreserved"
    );
}
