//! docs/configuration.md's settings: every variable the code reads, recorded (each function of
//! `template.yaml` started as deployed, `koe::app::wiring::variables_read`; koe-local's whole
//! configuration), with the functions that read it, its default and what it accepts (both found
//! by setting it and comparing the configuration), the template parameter that sets it, and
//! what it means ([`meaning`], the one hand-written part, which must cover exactly the variables
//! read).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use koe::app::ports::Served;
use koe::app::wiring::variables_read;
use koe::app::{STREAMED, Visit};
use koe::platform::config::{
    self, ApnsPoolConfig, AwsConfig, Config, ConfigError, LogConfig, PushSenderChoice, Vars,
};
use koe::platform::secrets::SECRET_VARS;
use koe_local::LocalConfig;
use serde_norway::Value;

use super::code;
use crate::deployed::{APNS_IDS, Stored, environment};
use crate::template::{load_yaml, repo_root, resources_of_type};

/// What a variable means (one line; the rest is in the columns the code fills).
fn meaning(var: &str) -> &'static str {
    match var {
        "OPENAI_API_KEY" => {
            "Unset or `not-set`: 500 `PROVIDER_NOT_CONFIGURED` (koe-local: \
             [a built-in model](local.md#koe-local))."
        }
        "OPENAI_BASE_URL" => "Any OpenAI-compatible API.",
        "PROVIDER_TIMEOUT_MS" => "Budget of a chat call or agent round.",
        "MAINTENANCE_MODE" | "MINIMUM_VERSION" | "INFO_MESSAGE" => "Reported by `/api/info`.",
        "METRICS" => "`off`: no metrics; else CloudWatch EMF lines on stdout.",
        "EVENT_BUS_NAME" => {
            "Bus of notifications and dispatch events (the dispatcher needs it); unset: logged."
        }
        "AGENT_API_KEYS" => {
            "Accepted `X-Api-Key`s, comma-separated; unset: 401 (koe-local: `local-dev-key`)."
        }
        "AGENT_DAILY_LIMIT" => "Round-1 calls per device per Japan day.",
        "AGENT_REQUIRE_DEVICE_SECRET" => {
            "`true`: round 1 needs the device secret \
             ([security.md](security.md#the-agents-daily-limit-and-device-ids))."
        }
        "AGENT_PLANNER_MODEL" => "Round-1 model (strict `json_schema`).",
        "AGENT_RESPONDER_MODEL" => "Round-2 model.",
        "AGENT_PERSONA" => {
            "The character's style; unset: the built-in こえ (deployed: 450 characters at most)."
        }
        "AGENT_STEP_KEY" => "Signs step ids; required (koe-local: a development key).",
        "CHAT_DAILY_TOKEN_CEILING" => {
            "Chat's model tokens a Japan day ([spend-guard.md](spend-guard.md))."
        }
        "AGENT_DAILY_TOKEN_CEILING" => "The same for the agent.",
        "STORE" => "A Lambda refuses `memory`.",
        "DEVICES_TABLE" => "Devices table ([dynamodb.md](dynamodb.md)).",
        "CALLS_TABLE" => "Reservations table.",
        "AGENT_USAGE_TABLE" => "Daily limit, plan answers, spend counters.",
        "DEVICE_HASH_SALT" => "Salt of the device hashes in logs.",
        "DISPATCH_GRACE_SECS" => "How late a call may still ring, later `missed`.",
        "DISPATCH_CLAIM_TIMEOUT_SECS" => {
            "When a claim without outcome is abandoned \
             ([dispatch.md](dispatch.md#writes-spent-as-a-budget))."
        }
        "DISPATCH_CONCURRENCY" => "Store calls and pushes in flight per run.",
        "DISPATCH_STORE_CONCURRENCY" => {
            "DynamoDB requests in flight per process; unset: 1,400 per vCPU of the memory \
             ([reliability.md](reliability.md#timeouts))."
        }
        "DISPATCH_CALLS_PER_WORKER" => {
            "Calls per invocation before a window is split ([scale.md](scale.md))."
        }
        "DISPATCH_MAX_WORKERS" => "The most parts.",
        "DISPATCH_WRITE_BUDGET" => {
            "The calls table's warm WRU/s, for the write plan \
             ([operations.md](operations.md#capacity-ahead-of-a-peak)); parameter 0: the default."
        }
        "DISPATCH_TABLE_WRITE_QUOTA" => {
            "The account's table-level write quota; caps `DISPATCH_WRITE_BUDGET`."
        }
        "CALL_CONFIRM_WAIT_MS" => {
            "Wait for a confirmation before pushing again ([app.md](app.md))."
        }
        "CALL_MAX_PUSHES" => "Pushes per call to a confirming device.",
        "PUSH_SENDER" => {
            "`apns`: no key, no start; `auto`: APNs once the key is stored, log until then; \
             `log`: never rings."
        }
        "APNS_KEY_P8" => "The `.p8` key (PEM or its base64). `APNS_*` all or none.",
        "APNS_BUNDLE_ID" | "APNS_KEY_ID" | "APNS_TEAM_ID" => "The app's bundle id, the key's ids.",
        "APNS_MAX_CONNECTIONS" => "APNs connections in the pool ([scale.md](scale.md#the-design)).",
        "APNS_ENDPOINT" => "Pushes go there, not to Apple ([local.md](local.md#koe-local)).",
        "DISPATCH_OIDC_JWKS_URL" => {
            "Issuer JWKS of `POST /internal/dispatch` (`http` on loopback only); the four all or \
             none (none: 401)."
        }
        "DISPATCH_OIDC_AUDIENCE" | "DISPATCH_OIDC_ISSUER" | "DISPATCH_OIDC_SERVICE_ACCOUNT" => {
            "Required `aud`, `iss`, verified `email`."
        }
        "RUST_LOG" => "Log filter (`info,koe=debug`); unset: `info`.",
        "AWS_REGION" | "AWS_DEFAULT_REGION" => "The region (set by Lambda).",
        "AWS_ENDPOINT_URL" => "Every AWS client's endpoint, for local runs.",
        "AWS_ENDPOINT_URL_DYNAMODB"
        | "AWS_ENDPOINT_URL_EVENTBRIDGE"
        | "AWS_ENDPOINT_URL_SECRETS_MANAGER" => "That client's endpoint, for local runs.",
        "AWS_LAMBDA_FUNCTION_NAME" => "Set by Lambda: the metrics' dimension.",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" => {
            "Set by Lambda: sets `DISPATCH_STORE_CONCURRENCY`'s default."
        }
        "CHAT_ADDR" => "Chat API address.",
        "AGENT_ADDR" => "Agent API address.",
        "LOCAL_DISPATCHER" => "Run the dispatcher in-process.",
        "KOE_TEST_CLOCK_OFFSET_DAYS" => "Moves the clock (the fixture test; debug builds only).",
        _ => "",
    }
}

/// Every section a process reads, printed, or the first error.
fn sections(vars: &Vars) -> Result<String, ConfigError> {
    Ok(format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        Config::from_vars(vars)?,
        LogConfig::from_vars(vars),
        AwsConfig::from_vars(vars),
        ApnsPoolConfig::from_vars(vars)?,
        PushSenderChoice::from_vars(vars)?,
        LocalConfig::from_vars(vars)?,
    ))
}

/// What koe-local's sections look up.
fn read_by_koe_local() -> BTreeSet<String> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let recorder = seen.clone();
    let _ = sections(&Vars::from_fn(move |name| {
        recorder.lock().unwrap().insert(name.to_owned());
        None
    }));
    seen.lock().unwrap().clone()
}

type Reads = std::pin::Pin<Box<dyn Future<Output = BTreeSet<String>>>>;

/// A function of the template: its logical id, its feature (the folder of its endpoint type)
/// and what it reads at its start-up, deployed as the template says (the secrets' variables
/// when it holds their `<VAR>_SECRET_ARN`).
struct Function {
    id: String,
    feature: String,
    read: BTreeSet<String>,
}

async fn functions(template: &Value) -> Vec<Function> {
    fn start<E: Served>(env: BTreeMap<String, String>) -> Reads {
        Box::pin(async move {
            let vars = Vars::from_map(env.into_iter().collect());
            variables_read::<E>(vars, Arc::new(Stored { apns_key: true }))
                .await
                .0
        })
    }
    fn feature<E>() -> &'static str {
        std::any::type_name::<E>().split("::").nth(1).unwrap()
    }
    type Start = (fn(BTreeMap<String, String>) -> Reads, &'static str);
    struct Collect(BTreeMap<&'static str, Start>);
    impl Visit for Collect {
        fn visit<E: Served>(&mut self) {
            self.0
                .insert(E::ROUTE.function, (start::<E>, feature::<E>()));
        }
    }
    let mut starts = Collect(BTreeMap::new());
    koe::app::each(&mut starts);
    for streamed in STREAMED {
        type Stream = koe::chat::api::ChatStream;
        let function = streamed.route.function;
        starts
            .0
            .insert(function, (start::<Stream>, feature::<Stream>()));
    }
    type Run = koe::dispatch::api::Dispatch;
    let mut out = Vec::new();
    for id in resources_of_type(template, "AWS::Serverless::Function") {
        // The dispatch runs (a scheduled run, a part) start as the dispatcher's route does.
        let (start, feature) = starts
            .0
            .get(id.as_str())
            .copied()
            .unwrap_or((start::<Run>, feature::<Run>()));
        let mut read = start(environment(template, &id, APNS_IDS)).await;
        let env = environment(template, &id, APNS_IDS);
        for (var, arn) in SECRET_VARS {
            // Every start-up looks each `<VAR>_SECRET_ARN` up: a function reads the secrets it
            // holds.
            match env.contains_key(arn) {
                true => read.insert(var.to_owned()),
                false => read.remove(var),
            };
        }
        out.push(Function {
            id: id.clone(),
            feature: feature.to_owned(),
            read,
        });
    }
    out
}

/// `ChatFunction` → `Chat`.
fn short(id: &str) -> &str {
    id.trim_end_matches("Function")
}

/// The functions that read `var`: `every function`, `all but` a few, else each feature whose functions all do,
/// and the others by name (`ChatFunction` as `Chat`).
fn read_by(functions: &[Function], var: &str) -> Vec<String> {
    let reads = |f: &Function| f.read.contains(var);
    let others: Vec<&str> = functions
        .iter()
        .filter(|f| !reads(f))
        .map(|f| short(&f.id))
        .collect();
    match others.len() {
        0 => return vec!["every function".to_owned()],
        1..=3 if functions.len() > 8 => return vec![format!("all but {}", others.join(", "))],
        _ => {}
    }
    let features: BTreeSet<&str> = functions.iter().map(|f| f.feature.as_str()).collect();
    let mut out = Vec::new();
    for feature in features {
        let of: Vec<&Function> = functions.iter().filter(|f| f.feature == feature).collect();
        if of.iter().all(|f| reads(f)) {
            out.push(feature.to_owned());
        } else {
            out.extend(
                of.iter()
                    .filter(|f| reads(f))
                    .map(|f| short(&f.id).to_owned()),
            );
        }
    }
    out
}

/// The template parameter each variable is set from (`!Ref P`, or `!If` with one).
fn parameters(template: &Value) -> BTreeMap<String, BTreeSet<String>> {
    fn parameter(template: &Value, value: &Value) -> Option<String> {
        match value {
            Value::Tagged(t) if t.tag == "Ref" => {
                let name = t.value.as_str()?;
                template["Parameters"].get(name).map(|_| name.to_owned())
            }
            Value::Tagged(t) if t.tag == "If" => t.value.as_sequence()?[1..]
                .iter()
                .find_map(|branch| parameter(template, branch)),
            _ => None,
        }
    }
    let mut out = BTreeMap::new();
    let functions = resources_of_type(template, "AWS::Serverless::Function");
    let own = functions
        .iter()
        .map(|id| &template["Resources"][id.as_str()]["Properties"]["Environment"]["Variables"]);
    let globals = &template["Globals"]["Function"]["Environment"]["Variables"];
    for variables in std::iter::once(globals).chain(own) {
        for (name, value) in variables.as_mapping().into_iter().flatten() {
            if let Some(p) = parameter(template, value) {
                let var = name.as_str().unwrap().to_owned();
                out.entry(var).or_insert_with(BTreeSet::new).insert(p);
            }
        }
    }
    out
}

/// What a variable's default may be: the literals of the configuration code (`int_or("X", 50,
/// ..)`, `Some("apns")`) and its defaults' constants. Each is only taken where it is one.
fn candidates() -> Vec<String> {
    let mut sources = String::new();
    for dir in ["shared/src/platform/config", "koe-local/src"] {
        for entry in std::fs::read_dir(repo_root().join(dir)).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
            // The code, not its tests.
            sources += text.split("#[cfg(test)]").next().unwrap();
        }
    }
    let quoted = sources.split('"').skip(1).step_by(2).map(str::to_owned);
    let numbers = sources
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .map(|w| w.replace('_', ""))
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()));
    // Words before numbers: `false` is tried before `0`.
    let mut out: Vec<String> = vec!["true".to_owned(), "false".to_owned()];
    out.extend(quoted);
    out.extend(numbers);
    out.extend([
        config::DEFAULT_OPENAI_BASE_URL.to_owned(),
        config::DEFAULT_PROVIDER_TIMEOUT_MS.to_string(),
        config::DEFAULT_DAILY_TOKEN_CEILING.to_string(),
        config::DEFAULT_APNS_MAX_CONNECTIONS.to_string(),
        config::DEFAULT_AGENT_MODEL.to_owned(),
    ]);
    out.retain(|c| {
        let plain = c.trim() == c && c.len() < 80 && !c.contains(['{', '\\']);
        plain && c.starts_with(|c: char| c.is_ascii_alphanumeric())
    });
    let mut seen = BTreeSet::new();
    out.retain(|c| seen.insert(c.clone()));
    out
}

/// Values of `value`'s kind no default is alone in reading as unset does: an integer's
/// least and greatest (`accepts`), a bool's both, two strings.
fn probes(value: &str, accepts: Option<&str>) -> Vec<String> {
    if value.chars().all(|c| c.is_ascii_digit()) {
        let ends = accepts.map_or(vec![], |r| r.split(" to ").map(str::to_owned).collect());
        let few = ["0", "1", "2", "999999999"].map(str::to_owned);
        [few.to_vec(), ends].concat()
    } else if value == "true" || value == "false" {
        vec!["true".to_owned(), "false".to_owned()]
    } else {
        vec!["probe".to_owned(), "https://probe.example/v1".to_owned()]
    }
}

/// A variable's default (the value that reads as unset does, or `unset` when unset is no
/// value) and what it accepts (the error a value of no shape gets), each `None` when the
/// configuration does not tell.
fn default_and_accepts(var: &str, candidates: &[String]) -> (Option<String>, Option<String>) {
    let unset = sections(&Vars::from_pairs(&[])).expect("the defaults start");
    let with = |value: &str| sections(&Vars::from_pairs(&[(var, value)]));
    let accepts = match with("\u{1} no shape") {
        Err(e) if e.var == var => {
            let reason = e.reason.trim_start_matches("must be ");
            // Its shape; the error itself says the rest (a model name's characters).
            let shape = reason.split(", e.g.").next().unwrap();
            let shape = shape.split(" of at most").next().unwrap();
            Some(shape.trim_start_matches("an integer from ").to_owned())
        }
        _ => None,
    };
    let same = |value: &str| with(value).ok().as_ref() == Some(&unset);
    // A default is the one candidate of its kind read as unset is, where other values of that
    // kind are read otherwise (a value that is ignored, or capped, is no default).
    let bool_like = |c: &&String| *c == "true" || *c == "false";
    let number = |c: &&String| c.chars().all(|c| c.is_ascii_digit());
    let word = |c: &&String| !bool_like(c) && !number(c);
    let read_as_unset: Vec<&String> = candidates.iter().filter(|c| same(c)).collect();
    let kinds: [&dyn Fn(&&String) -> bool; 3] = [&bool_like, &word, &number];
    for kind in kinds {
        let of: Vec<&String> = read_as_unset.iter().copied().filter(kind).collect();
        match of[..] {
            [] => continue,
            [c] if probes(c, accepts.as_deref())
                .iter()
                .all(|p| p == c || !same(p)) =>
            {
                return (Some(code(c)), accepts);
            }
            _ => break,
        }
    }
    let other = ["probe", "1", "https://probe.example/v1", "true"]
        .iter()
        .filter_map(|p| with(p).ok())
        .find(|printed| *printed != unset);
    let Some(other) = other else {
        return (None, accepts);
    };
    // Where the two differ, unset prints `None`.
    let mut at = unset
        .bytes()
        .zip(other.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    while at > 0 && unset.as_bytes()[at - 1].is_ascii_alphanumeric() {
        at -= 1;
    }
    let none = unset[at..].starts_with("None");
    (none.then(|| "unset".to_owned()), accepts)
}

pub(super) async fn table() -> String {
    let template = load_yaml("template.yaml");
    let functions = functions(&template).await;
    let local = read_by_koe_local();
    let parameters = parameters(&template);
    let secret = |var: &str| SECRET_VARS.iter().any(|(v, _)| *v == var);
    let arn = |var: &str| SECRET_VARS.iter().any(|(_, a)| *a == var);
    let mut vars: BTreeSet<&str> = local.iter().map(String::as_str).collect();
    vars.extend(functions.iter().flat_map(|f| &f.read).map(String::as_str));
    let candidates = candidates();
    // Rows alike but for the name and parameter are one (`APNS_KEY_ID`, `APNS_TEAM_ID`, ...).
    let mut rows: Vec<[String; 6]> = Vec::new();
    let mut problems = Vec::new();
    for var in vars.into_iter().filter(|v| !arn(v)) {
        // koe-local reads every section: named only where no function reads the variable.
        let read_by = match read_by(&functions, var).join(", ") {
            none if none.is_empty() => "koe-local".to_owned(),
            some => some,
        };
        let (default, accepts) = default_and_accepts(var, &candidates);
        let meaning = meaning(var);
        if meaning.is_empty() {
            problems.push(var);
        }
        let name = match secret(var) {
            true => format!("{} (*secret*)", code(var)),
            false => code(var),
        };
        // `=`: the variable's name in CamelCase (`OpenAiBaseUrl` for `OPENAI_BASE_URL`).
        let camel: String = var.split('_').map(|w| w.to_lowercase()).collect();
        let parameter = parameters.get(var).map_or(String::new(), |p| {
            let named = |p: &String| match p.to_lowercase() == camel {
                true => "=".to_owned(),
                false => code(p),
            };
            p.iter().map(named).collect::<Vec<_>>().join(", ")
        });
        let row = [
            name,
            read_by,
            default.unwrap_or_default(),
            accepts.unwrap_or_default(),
            parameter,
            meaning.to_owned(),
        ];
        let alike = |r: &&mut [String; 6]| r[1..4] == row[1..4] && r[5] == row[5];
        match rows.iter_mut().find(alike) {
            Some(first) => {
                first[0] += &format!(", {}", row[0]);
                let comma = if first[4].is_empty() { "" } else { ", " };
                if !row[4].is_empty() {
                    first[4] += &format!("{comma}{}", row[4]);
                }
            }
            None => rows.push(row),
        }
    }
    let mut out = String::from(
        "| variable | read by | default | accepts | parameter | meaning |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for row in rows {
        out += &format!("| {} |\n", row.join(" | "));
    }
    assert!(
        problems.is_empty(),
        "no meaning in docs_tables::settings::meaning for {problems:?}"
    );
    out
}
