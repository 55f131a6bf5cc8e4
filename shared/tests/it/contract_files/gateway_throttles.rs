//! Gateway throttles: on the chat API only its unauthenticated GETs' routes, and none below the
//! floor on either API; and both APIs' access logs.

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
/// throttles only GET /health and GET /api/info (unauthenticated, unreserved), by route; every
/// throttle, on any route or stage of either API, is never below the floor.
#[test]
fn gateway_throttles_stay_off_chat_and_above_the_floor_on_agent() {
    let template = load_yaml("template.yaml");
    let resources = template["Resources"].as_mapping().unwrap();
    let mut apis = 0;
    let mut chat_routes_throttled = 0;
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
            for (route, route_settings) in routes {
                let route = route.as_str().unwrap();
                if id == Api::Chat.template_id() {
                    assert!(
                        ["GET /health", "GET /api/info"].contains(&route),
                        "the chat API throttles only its unauthenticated GETs, not {route}"
                    );
                    chat_routes_throttled += 1;
                } else {
                    settings.push(route_settings);
                }
            }
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
    assert_eq!(chat_routes_throttled, 2, "GET /health and GET /api/info");
    // Their throttles, by route, are above the floor too.
    let chat = &template["Resources"][Api::Chat.template_id()]["Properties"];
    for route in chat["RouteSettings"].as_mapping().unwrap().values() {
        for key in ["ThrottlingRateLimit", "ThrottlingBurstLimit"] {
            assert!(
                lowest_number(&template, &route[key]) >= THROTTLE_RATE_FLOOR,
                "{key}"
            );
        }
    }

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

/// The access log's fields: the `$context` variables each API's log line may carry, and the
/// ones it must (request id, route, status, latency, integration error). Nothing else: no
/// source IP (`$context.identity.*`), no query string or header (`$request.*`), no path.
const ACCESS_LOG_ALLOWED: &[&str] = &[
    "$context.requestId",
    "$context.routeKey",
    "$context.status",
    "$context.responseLatency",
    "$context.integrationLatency",
    "$context.integrationStatus",
    "$context.integrationErrorMessage",
    "$context.error.message",
    "$context.requestTimeEpoch",
];
const ACCESS_LOG_REQUIRED: &[&str] = &[
    "$context.requestId",
    "$context.routeKey",
    "$context.status",
    "$context.responseLatency",
    "$context.integrationErrorMessage",
];

#[test]
fn both_apis_log_their_answers_without_personal_data() {
    let template = load_yaml("template.yaml");
    for api in [Api::Chat, Api::Agent] {
        let id = api.template_id();
        let settings = &template["Resources"][id]["Properties"]["AccessLogSettings"];
        let format = settings["Format"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: no access log"));
        let line: serde_json::Value = serde_json::from_str(format)
            .unwrap_or_else(|e| panic!("{id}: the format is one JSON object: {e}"));
        let fields: Vec<&str> = line
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_str().expect("each field a quoted variable"))
            .collect();
        for field in &fields {
            assert!(
                ACCESS_LOG_ALLOWED.contains(field),
                "{id} logs {field}: not in the allowed list (no source IP, query string, header)"
            );
        }
        for needed in ACCESS_LOG_REQUIRED {
            assert!(fields.contains(needed), "{id} does not log {needed}");
        }
        for personal in [
            "identity",
            "sourceIp",
            "$request",
            "querystring",
            "header",
            "path",
        ] {
            assert!(
                !format.contains(personal),
                "{id}'s access log names {personal}"
            );
        }
        // Into a log group of the stack, kept as long as the functions' logs.
        let Value::Tagged(arn) = &settings["DestinationArn"] else {
            panic!("{id}: DestinationArn is !GetAtt <group>.Arn")
        };
        let group = arn.value.as_str().unwrap().strip_suffix(".Arn").unwrap();
        let group = &template["Resources"][group];
        assert_eq!(group["Type"], "AWS::Logs::LogGroup", "{id}");
        let Value::Tagged(retention) = &group["Properties"]["RetentionInDays"] else {
            panic!("{id}'s log group keeps its lines for LogRetentionDays")
        };
        assert_eq!(retention.value.as_str(), Some("LogRetentionDays"), "{id}");
    }
}
