//! The sentinels: personal data no log line may hold, and the device ids of a pass.

/// The requests the passes send most, as [`Pass::expect_json`] takes them.
pub(super) const POST_AGENT: (http::Method, &str) = (http::Method::POST, "/agent");
pub(super) const POST_CALLS: (http::Method, &str) = (http::Method::POST, "/calls");
pub(super) const PUT_DEVICES: (http::Method, &str) = (http::Method::PUT, "/devices");

pub(super) const SALT: &str = "audit-salt";
pub(super) const AGENT_KEY: &str = "SENTINEL-AGENTKEY-4a1f";
pub(super) const WRONG_KEY: &str = "SENTINEL-WRONGKEY-8b2e";
pub(super) const OPENAI_KEY: &str = "sk-SENTINEL-OPENAIKEY-c93d";
pub(super) const CHAT_TEXT: &str = "SENTINEL-CHATTEXT-d04c";
pub(super) const CHAT_REPLY: &str = "SENTINEL-CHATREPLY-e15b";
pub(super) const AGENT_MESSAGE: &str = "SENTINEL-AGENTMSG-f26a";
pub(super) const AGENT_REPLY: &str = "SENTINEL-AGENTREPLY-0379";
pub(super) const TITLE: &str = "SENTINEL-TITLE-1488";
/// Calendar times nobody else uses, so any trace of them is a leak.
pub(super) const EVENT_START: &str = "2031-07-19T13:37:11+09:00";
pub(super) const EVENT_END: &str = "2031-07-19T14:48:22+09:00";
pub(super) const CALLER: &str = "SENTINEL-CALLER-2597";
pub(super) const UPSTREAM: &str = "SENTINEL-UPSTREAM-36a6";
pub(super) const ID_TOKEN_JUNK: &str = "SENTINEL-IDTOKEN-47b5";
pub(super) const CLAIM_EMAIL: &str = "sentinel-claim-58c4@evil.test";
/// A made-up `X-Device-Secret` (the issued ones are collected per pass and forbidden too).
pub(super) const WRONG_SECRET: &str = "SENTINEL-DEVSECRET-69d7";
pub(super) const IDEMPOTENCY_KEY: &str = "SENTINEL-IDEMKEY-7ae8";
/// VoIP token hex (sent in upper case; stored lower case).
pub(super) const TOKEN_HEX: &str = "5e471ae15e471ae1";
/// Alert token hex (`alertToken`, the missed-call notice's; sent in upper case).
pub(super) const ALERT_HEX: &str = "a1e470cea1e470ce";

/// The device ids of one pass, in clear (with the pass's name, so passes never share them).
pub(super) struct Devices {
    pub(super) agent: String,
    pub(super) registered: String,
    pub(super) unregistered: String,
    pub(super) cancelled: String,
    pub(super) dispatched: String,
    /// Registered with its secret proven.
    pub(super) secret: String,
    /// Reserved with an `Idempotency-Key`.
    pub(super) idempotent: String,
}

impl Devices {
    pub(super) fn of(pass: &str) -> Devices {
        let id = |what: &str| format!("SENTINEL-DEVICE-{what}-{pass}");
        Devices {
            agent: id("agent"),
            registered: id("registered"),
            unregistered: id("unregistered"),
            cancelled: id("cancelled"),
            dispatched: id("dispatched"),
            secret: id("secret"),
            idempotent: id("idempotent"),
        }
    }

    pub(super) fn all(&self) -> [&str; 7] {
        [
            &self.agent,
            &self.registered,
            &self.unregistered,
            &self.cancelled,
            &self.dispatched,
            &self.secret,
            &self.idempotent,
        ]
    }
}

pub(super) fn voip_token() -> String {
    TOKEN_HEX.repeat(4).to_uppercase()
}

pub(super) fn alert_token() -> String {
    ALERT_HEX.repeat(4).to_uppercase()
}

/// Every sentinel, and distinctive parts a partial or re-encoded leak would show.
pub(super) fn forbidden() -> Vec<String> {
    let mut list: Vec<String> = [
        AGENT_KEY,
        "AGENTKEY-4a1f",
        WRONG_KEY,
        "WRONGKEY-8b2e",
        OPENAI_KEY,
        "OPENAIKEY-c93d",
        CHAT_TEXT,
        "CHATTEXT-d04c",
        CHAT_REPLY,
        "CHATREPLY-e15b",
        AGENT_MESSAGE,
        "AGENTMSG-f26a",
        AGENT_REPLY,
        "AGENTREPLY-0379",
        TITLE,
        "TITLE-1488",
        // The event times: their date (also in UTC), and the times with their offset (a bare
        // "13:37:11" could be any log line's own timestamp).
        "2031-07-19",
        "13:37:11+09:00",
        "14:48:22+09:00",
        CALLER,
        "CALLER-2597",
        UPSTREAM,
        "UPSTREAM-36a6",
        ID_TOKEN_JUNK,
        "IDTOKEN-47b5",
        CLAIM_EMAIL,
        TOKEN_HEX,
        &TOKEN_HEX.to_uppercase(),
        ALERT_HEX,
        &ALERT_HEX.to_uppercase(),
        "SENTINEL-DEVICE",
        "DEVICE-agent",
        "DEVICE-registered",
        "DEVICE-unregistered",
        "DEVICE-cancelled",
        "DEVICE-dispatched",
        "DEVICE-secret",
        "DEVICE-idempotent",
        WRONG_SECRET,
        "DEVSECRET-69d7",
        IDEMPOTENCY_KEY,
        "IDEMKEY-7ae8",
        // The sentinels' shared prefix: no sentinel at all, whole or in part.
        "SENTINEL",
        "sentinel",
    ]
    .map(str::to_owned)
    .to_vec();
    list.push(format!("{:?}", CHAT_TEXT.as_bytes()));
    list
}
